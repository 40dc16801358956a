/* Fake CUDA driver on host memory (see fake_cuda.h for what it emulates).
 * Every entry point takes the one mutex, counts the call, applies injected
 * failures, then works on plain linked lists; the lists stay short in tests. */
#include "fake_cuda.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cuda/kernels.h"

_Static_assert(sizeof(egm_cuda_api_t) == EGM_FAKE_CUDA_N_FUNCTIONS * sizeof(void (*)(void)),
               "EGM_FAKE_CUDA_FUNCTIONS must list every entry of egm_cuda_api_t");

#define FABRIC_PREFIX "/egm-fake-fab-"
#define FABRIC_NAME_MAX 40
#define FABRIC_MAGIC 0x31414645u /* "EFA1" */
#define MEMFD_NAME "egm-fake-cuda"
#define MAX_RULES 64
#define MAX_OVERRIDES 64
#define DEFAULT_GRANULARITY ((size_t)2 << 20)
#define PRIORITY_LEAST 0
#define PRIORITY_GREATEST (-5)
#define HOST_LOCATION_TYPE 0x2 /* CU_MEM_LOCATION_TYPE_HOST, accepted in access descriptors */
#define ACCESS_READ 0x1
#define SRC_ACCESS_ORDER_ANY 0x3

enum {
#define X(fn) FN_##fn,
    EGM_FAKE_CUDA_FUNCTIONS(X)
#undef X
        FN_COUNT
};
_Static_assert(FN_COUNT == EGM_FAKE_CUDA_N_FUNCTIONS, "function count");

static const char *const fn_names[FN_COUNT] = {
#define X(fn) #fn,
    EGM_FAKE_CUDA_FUNCTIONS(X)
#undef X
};

/* The file behind an allocation; shared by the handles and mappings of it. */
typedef struct backing {
    struct backing *next;
    int fd;
    size_t size;
    egm_cu_mem_location_t location;
    int handle_types;
    char name[FABRIC_NAME_MAX]; /* shm name, "" for a memfd */
    pid_t owner;                /* process that unlinks the name (0: none) */
    unsigned refs;              /* handles + mappings */
    dev_t st_dev;
    ino_t st_ino;
} backing_t;

typedef struct handle {
    struct handle *next;
    uint64_t id;
    backing_t *backing;
    int imported;
} handle_t;

typedef struct reservation {
    struct reservation *next;
    uintptr_t start;
    size_t size;
} reservation_t;

typedef struct mapping {
    struct mapping *next;
    uintptr_t start;
    size_t size;
    backing_t *backing;
    char *shadow; /* the fake's own RW view of the same file */
    unsigned char device_flags[EGM_FAKE_CUDA_MAX_DEVICES];
    unsigned char host_flags;
} mapping_t;

enum { RANGE_DEVICE = 1, RANGE_HOST_ALLOC, RANGE_HOST_REGISTERED };

typedef struct range {
    struct range *next;
    int kind;
    uintptr_t start;
    size_t size;
    size_t map_len;
    int device;
    char *shadow; /* device allocations: the fake's RW view */
} range_t;

struct egm_cu_ctx_st {
    int device;
    unsigned retain;
};

struct egm_cu_stream_st {
    struct egm_cu_stream_st *next;
    int device;
    unsigned flags;
    int priority;
};

struct egm_cu_event_st {
    struct egm_cu_event_st *next;
    int device;
    unsigned flags;
    int recorded;
    struct timespec when;
};

struct egm_cu_func_st {
    struct egm_cu_module_st *module;
};

struct egm_cu_module_st {
    struct egm_cu_module_st *next;
    int device;
    struct egm_cu_func_st copy_blocks;
};

typedef struct {
    int fn;
    unsigned countdown; /* 0: every call */
    egm_cu_result_t error;
} rule_t;

typedef struct {
    int device; /* -1: all */
    int attribute;
    int value;
} override_t;

static struct {
    int initialized;
    int n_devices;
    int n_numa;
    size_t granularity;
    int fabric_supported;
    int fabric_permitted;
    int strict_device;
    override_t overrides[MAX_OVERRIDES];
    size_t n_overrides;

    backing_t *backings;
    handle_t *handles;
    reservation_t *reservations;
    mapping_t *mappings;
    range_t *ranges;
    struct egm_cu_stream_st *streams;
    struct egm_cu_event_st *events;
    struct egm_cu_module_st *modules;

    uint64_t next_handle_id;
    unsigned fabric_counter;
    rule_t rules[MAX_RULES];
    size_t n_rules;
    uint64_t calls[FN_COUNT];
    uint64_t fired;                    /* injected failures answered since the rules were cleared */
    uint64_t calls_at_fault[FN_COUNT]; /* calls when the first of them was answered */
    uint64_t kernel_launches;
    uint64_t bytes_copied;
} g = {
    .n_devices = 2,
    .n_numa = 1,
    .granularity = DEFAULT_GRANULARITY,
    .fabric_supported = 1,
    .fabric_permitted = 1,
    .next_handle_id = 1,
};

static struct egm_cu_ctx_st g_ctx[EGM_FAKE_CUDA_MAX_DEVICES];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static __thread struct egm_cu_ctx_st *tls_ctx;

/* ---- locking ------------------------------------------------------------ */

/* Tests fork while other threads may hold the lock: keep it consistent. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&g_lock);
}

static void atfork_release(void)
{
    pthread_mutex_unlock(&g_lock);
}

static void init_once(void)
{
    for (int i = 0; i < EGM_FAKE_CUDA_MAX_DEVICES; i++)
        g_ctx[i].device = i;
    pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

static void lock(void)
{
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_lock);
}

static void unlock(void)
{
    pthread_mutex_unlock(&g_lock);
}

static int fn_index(const char *function)
{
    for (int i = 0; i < FN_COUNT; i++)
        if (function && strcmp(function, fn_names[i]) == 0)
            return i;
    fprintf(stderr, "fake_cuda: unknown function name '%s'\n", function ? function : "(null)");
    abort();
}

/* Locks, counts the call and answers an injected failure or NOT_INITIALIZED.
 * Every rule of the function counts the call; the first that fires wins. */
static egm_cu_result_t begin(int fn)
{
    lock();
    g.calls[fn]++;
    egm_cu_result_t rc = EGM_CU_SUCCESS;
    for (size_t i = g.n_rules; i-- > 0;) {
        rule_t *r = &g.rules[i];
        if (r->fn != fn)
            continue;
        if (r->countdown == 0) {
            rc = rc ? rc : r->error;
        } else if (--r->countdown == 0) {
            rc = rc ? rc : r->error;
            g.rules[i] = g.rules[--g.n_rules]; /* that slot was visited already */
        }
    }
    if (rc != EGM_CU_SUCCESS) {
        if (g.fired++ == 0)
            memcpy(g.calls_at_fault, g.calls, sizeof(g.calls));
        return rc;
    }
    if (!g.initialized && fn != FN_cuInit && fn != FN_cuDriverGetVersion &&
        fn != FN_cuGetErrorName && fn != FN_cuGetErrorString)
        return EGM_CU_ERROR_NOT_INITIALIZED;
    return EGM_CU_SUCCESS;
}

#define BEGIN(fn)                                                                                  \
    egm_cu_result_t rc = begin(FN_##fn);                                                           \
    if (rc != EGM_CU_SUCCESS)                                                                      \
    goto out
#define END                                                                                        \
    out:                                                                                           \
    unlock();                                                                                      \
    return rc

/* ---- helpers ------------------------------------------------------------ */

static int valid_device(int device)
{
    return device >= 0 && device < g.n_devices;
}

/* Device of the live current context of this thread, or -1. */
static int current_device(void)
{
    struct egm_cu_ctx_st *c = tls_ctx;
    if (!c || c->retain == 0 || !valid_device(c->device))
        return -1;
    return c->device;
}

static struct egm_cu_stream_st *find_stream(egm_cu_stream_t s)
{
    for (struct egm_cu_stream_st *p = g.streams; p; p = p->next)
        if (p == s)
            return p;
    return NULL;
}

static struct egm_cu_event_st *find_event(egm_cu_event_t e)
{
    for (struct egm_cu_event_st *p = g.events; p; p = p->next)
        if (p == e)
            return p;
    return NULL;
}

static struct egm_cu_module_st *find_module(egm_cu_module_t m)
{
    for (struct egm_cu_module_st *p = g.modules; p; p = p->next)
        if (p == m)
            return p;
    return NULL;
}

/* Device a stream-ordered call runs on: the stream's, or the current one for
 * the NULL stream. */
static egm_cu_result_t stream_device(egm_cu_stream_t stream, int *device_p)
{
    int cur = current_device();
    if (!stream) {
        if (cur < 0)
            return EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        *device_p = cur;
        return EGM_CU_SUCCESS;
    }
    struct egm_cu_stream_st *s = find_stream(stream);
    if (!s)
        return EGM_CU_ERROR_INVALID_HANDLE;
    if (cur < 0)
        return EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    *device_p = s->device;
    return EGM_CU_SUCCESS;
}

static handle_t *find_handle(egm_cu_mem_handle_t id)
{
    for (handle_t *h = g.handles; h; h = h->next)
        if (h->id == id)
            return h;
    return NULL;
}

static int valid_location(const egm_cu_mem_location_t *loc)
{
    if (loc->type == EGM_CU_MEM_LOCATION_TYPE_DEVICE)
        return valid_device(loc->id);
    if (loc->type == EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA)
        return loc->id >= 0 && loc->id < g.n_numa;
    return 0;
}

static void backing_put(backing_t *b)
{
    if (--b->refs > 0)
        return;
    for (backing_t **pp = &g.backings; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    if (b->name[0] && b->owner == getpid())
        shm_unlink(b->name);
    close(b->fd);
    free(b);
}

static backing_t *backing_by_inode(dev_t dev, ino_t ino)
{
    for (backing_t *b = g.backings; b; b = b->next)
        if (b->st_dev == dev && b->st_ino == ino)
            return b;
    return NULL;
}

/* New backing record owning fd (closed on failure). */
static backing_t *backing_new(int fd, size_t size, const egm_cu_mem_location_t *loc, int types)
{
    struct stat st;
    backing_t *b = calloc(1, sizeof(*b));
    if (!b || fstat(fd, &st) != 0) {
        free(b);
        close(fd);
        return NULL;
    }
    b->fd = fd;
    b->size = size;
    b->location = *loc;
    b->handle_types = types;
    b->st_dev = st.st_dev;
    b->st_ino = st.st_ino;
    b->next = g.backings;
    g.backings = b;
    return b;
}

static handle_t *handle_new(backing_t *b, int imported)
{
    handle_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->id = (g.next_handle_id++ << 4) | 0x5; /* never 0, never reused */
    h->backing = b;
    h->imported = imported;
    b->refs++;
    h->next = g.handles;
    g.handles = h;
    return h;
}

static mapping_t *mapping_at(uintptr_t addr)
{
    for (mapping_t *m = g.mappings; m; m = m->next)
        if (addr >= m->start && addr - m->start < m->size)
            return m;
    return NULL;
}

static reservation_t *reservation_at(uintptr_t addr)
{
    for (reservation_t *r = g.reservations; r; r = r->next)
        if (addr >= r->start && addr - r->start < r->size)
            return r;
    return NULL;
}

static range_t *range_at(uintptr_t addr)
{
    for (range_t *r = g.ranges; r; r = r->next)
        if (addr >= r->start && addr - r->start < r->size)
            return r;
    return NULL;
}

static int overlaps(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
    return a < b + blen && b < a + alen;
}

/* [ptr, ptr + size) is exactly a union of whole mappings (at least one). */
static int whole_mappings(uintptr_t ptr, size_t size)
{
    size_t covered = 0;
    if (size == 0 || ptr + size < ptr)
        return 0;
    for (mapping_t *m = g.mappings; m; m = m->next) {
        if (!overlaps(ptr, size, m->start, m->size))
            continue;
        if (m->start < ptr || m->start + m->size > ptr + size)
            return 0;
        covered += m->size;
    }
    return covered == size;
}

static void mapping_drop(mapping_t *m)
{
    for (mapping_t **pp = &g.mappings; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    munmap(m->shadow, m->size);
    backing_put(m->backing);
    free(m);
}

static void range_drop(range_t *r)
{
    for (range_t **pp = &g.ranges; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (r->kind != RANGE_HOST_REGISTERED)
        munmap((void *)r->start, r->map_len);
    if (r->shadow)
        munmap(r->shadow, r->map_len);
    free(r);
}

/* ---- address resolution for copies -------------------------------------- */

typedef struct {
    char *host;
    size_t len;
} piece_t;

enum { MODE_ENGINE, MODE_KERNEL, MODE_VIEW };

/* Where the CPU touches the piece of [addr, addr + len) that starts at addr,
 * checking the access the copying device would need. */
static egm_cu_result_t resolve(uintptr_t addr, size_t len, int device, int mode, int write,
                               piece_t *p)
{
    egm_cu_result_t bad =
        mode == MODE_KERNEL ? EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS : EGM_CU_ERROR_INVALID_VALUE;
    if (addr == 0)
        return bad;
    mapping_t *m = mapping_at(addr);
    if (m) {
        if (mode != MODE_VIEW) {
            unsigned need = write ? EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE : ACCESS_READ;
            if ((m->device_flags[device] & need) != need)
                return bad;
        }
        p->host = m->shadow + (addr - m->start);
        p->len = m->start + m->size - addr;
        if (p->len > len)
            p->len = len;
        return EGM_CU_SUCCESS;
    }
    if (reservation_at(addr))
        return bad; /* reserved but not mapped */
    range_t *r = range_at(addr);
    if (r) {
        /* a kernel reaches another device's cudaMalloc memory only with peer access */
        if (mode == MODE_KERNEL && r->kind == RANGE_DEVICE && r->device != device)
            return bad;
        p->host = r->shadow ? r->shadow + (addr - r->start) : (char *)addr;
        p->len = r->start + r->size - addr;
        if (p->len > len)
            p->len = len;
        return EGM_CU_SUCCESS;
    }
    if (mode != MODE_ENGINE)
        return bad; /* kernels cannot touch pageable host memory */
    /* pageable host memory, up to the next range the driver knows */
    uintptr_t end = addr + len;
    for (mapping_t *q = g.mappings; q; q = q->next)
        if (q->start > addr && q->start < end)
            end = q->start;
    for (reservation_t *q = g.reservations; q; q = q->next)
        if (q->start > addr && q->start < end)
            end = q->start;
    for (range_t *q = g.ranges; q; q = q->next)
        if (q->start > addr && q->start < end)
            end = q->start;
    p->host = (char *)addr;
    p->len = end - addr;
    return EGM_CU_SUCCESS;
}

/* Copies (or only checks) len bytes src -> dst as `device` would. */
static egm_cu_result_t transfer(uintptr_t dst, uintptr_t src, size_t len, int device, int mode,
                                int do_copy)
{
    if (dst + len < dst || src + len < src)
        return EGM_CU_ERROR_INVALID_VALUE;
    while (len > 0) {
        piece_t d, s;
        egm_cu_result_t rc = resolve(dst, len, device, mode, 1, &d);
        if (rc == EGM_CU_SUCCESS)
            rc = resolve(src, len, device, mode, 0, &s);
        if (rc != EGM_CU_SUCCESS)
            return rc;
        size_t n = d.len < s.len ? d.len : s.len;
        if (do_copy) {
            memmove(d.host, s.host, n);
            g.bytes_copied += n;
        }
        dst += n;
        src += n;
        len -= n;
    }
    return EGM_CU_SUCCESS;
}

/* Checks that `device` may read (or write) all of [addr, addr + len). */
static egm_cu_result_t check_span(uintptr_t addr, size_t len, int device, int mode, int write)
{
    if (addr + len < addr)
        return EGM_CU_ERROR_INVALID_VALUE;
    while (len > 0) {
        piece_t p;
        egm_cu_result_t rc = resolve(addr, len, device, mode, write, &p);
        if (rc != EGM_CU_SUCCESS)
            return rc;
        addr += p.len;
        len -= p.len;
    }
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t copy_checked(uintptr_t dst, uintptr_t src, size_t len, int device, int mode)
{
    egm_cu_result_t rc = transfer(dst, src, len, device, mode, 0);
    if (rc == EGM_CU_SUCCESS)
        rc = transfer(dst, src, len, device, mode, 1);
    return rc;
}

/* ---- initialisation, errors, devices ------------------------------------ */

static const struct {
    egm_cu_result_t rc;
    const char *name;
    const char *text;
} errors[] = {
    {EGM_CU_SUCCESS, "CUDA_SUCCESS", "no error"},
    {EGM_CU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {EGM_CU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {EGM_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {EGM_CU_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {EGM_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {EGM_FAKE_CU_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {EGM_CU_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {EGM_CU_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {EGM_CU_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {EGM_FAKE_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {EGM_FAKE_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {EGM_CU_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {EGM_CU_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {EGM_CU_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static egm_cu_result_t fake_cuInit(unsigned int flags)
{
    BEGIN(cuInit);
    if (flags != 0)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else if (g.n_devices == 0)
        rc = EGM_CU_ERROR_NO_DEVICE;
    else
        g.initialized = 1;
    END;
}

static egm_cu_result_t fake_cuDriverGetVersion(int *version)
{
    BEGIN(cuDriverGetVersion);
    if (!version)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else
        *version = 13000;
    END;
}

static egm_cu_result_t error_lookup(egm_cu_result_t error, const char **out, int text)
{
    if (!out)
        return EGM_CU_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].rc == error) {
            *out = text ? errors[i].text : errors[i].name;
            return EGM_CU_SUCCESS;
        }
    *out = NULL; /* as the driver does for values it does not know */
    return EGM_CU_ERROR_INVALID_VALUE;
}

static egm_cu_result_t fake_cuGetErrorName(egm_cu_result_t error, const char **name)
{
    BEGIN(cuGetErrorName);
    rc = error_lookup(error, name, 0);
    END;
}

static egm_cu_result_t fake_cuGetErrorString(egm_cu_result_t error, const char **text)
{
    BEGIN(cuGetErrorString);
    rc = error_lookup(error, text, 1);
    END;
}

static egm_cu_result_t fake_cuDeviceGetCount(int *count)
{
    BEGIN(cuDeviceGetCount);
    if (!count)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else
        *count = g.n_devices;
    END;
}

static egm_cu_result_t fake_cuDeviceGet(egm_cu_device_t *device, int ordinal)
{
    BEGIN(cuDeviceGet);
    if (!device)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else if (!valid_device(ordinal))
        rc = EGM_CU_ERROR_INVALID_DEVICE;
    else
        *device = ordinal;
    END;
}

static egm_cu_result_t fake_cuDeviceGetAttribute(int *value, int attribute, egm_cu_device_t device)
{
    BEGIN(cuDeviceGetAttribute);
    if (!value) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!valid_device(device)) {
        rc = EGM_CU_ERROR_INVALID_DEVICE;
        goto out;
    }
    for (size_t i = g.n_overrides; i-- > 0;) {
        override_t *o = &g.overrides[i];
        if (o->attribute == attribute && (o->device < 0 || o->device == device)) {
            *value = o->value;
            goto out;
        }
    }
    switch (attribute) {
    case EGM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = 9;
        break;
    case EGM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = 0;
        break;
    case EGM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case 41:  /* UNIFIED_ADDRESSING */
    case 89:  /* CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM */
    case 116: /* GPU_DIRECT_RDMA_SUPPORTED */
        *value = 1;
        break;
    case EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
        *value = g.fabric_supported;
        break;
    case EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        *value = device % g.n_numa;
        break;
    case 1: /* MAX_THREADS_PER_BLOCK */
        *value = 1024;
        break;
    case 16: /* MULTIPROCESSOR_COUNT */
        *value = 132;
        break;
    case 40: /* ASYNC_ENGINE_COUNT */
        *value = 3;
        break;
    case 33: /* PCI_BUS_ID */
        *value = 0x18 + device;
        break;
    case 34: /* PCI_DEVICE_ID */
    case 50: /* PCI_DOMAIN_ID */
        *value = 0;
        break;
    default:
        rc = EGM_CU_ERROR_INVALID_VALUE;
        break;
    }
    END;
}

static egm_cu_result_t fake_cuDeviceGetName(char *name, int len, egm_cu_device_t device)
{
    BEGIN(cuDeviceGetName);
    if (!name || len <= 0)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else if (!valid_device(device))
        rc = EGM_CU_ERROR_INVALID_DEVICE;
    else
        snprintf(name, (size_t)len, "NVIDIA H200 (fake %d)", device);
    END;
}

static egm_cu_result_t fake_cuDevicePrimaryCtxRetain(egm_cu_context_t *ctx, egm_cu_device_t device)
{
    BEGIN(cuDevicePrimaryCtxRetain);
    if (!ctx)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else if (!valid_device(device))
        rc = EGM_CU_ERROR_INVALID_DEVICE;
    else {
        g_ctx[device].retain++;
        *ctx = &g_ctx[device];
    }
    END;
}

static egm_cu_result_t fake_cuDevicePrimaryCtxRelease(egm_cu_device_t device)
{
    BEGIN(cuDevicePrimaryCtxRelease);
    if (!valid_device(device))
        rc = EGM_CU_ERROR_INVALID_DEVICE;
    else if (g_ctx[device].retain == 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    else
        g_ctx[device].retain--;
    END;
}

static egm_cu_result_t fake_cuCtxSetCurrent(egm_cu_context_t ctx)
{
    BEGIN(cuCtxSetCurrent);
    if (!ctx)
        tls_ctx = NULL;
    else if (ctx < &g_ctx[0] || ctx >= &g_ctx[EGM_FAKE_CUDA_MAX_DEVICES] ||
             !valid_device(ctx->device) || ctx->retain == 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    else
        tls_ctx = ctx;
    END;
}

static egm_cu_result_t fake_cuCtxGetCurrent(egm_cu_context_t *ctx)
{
    BEGIN(cuCtxGetCurrent);
    if (!ctx)
        rc = EGM_CU_ERROR_INVALID_VALUE;
    else
        *ctx = current_device() < 0 ? NULL : tls_ctx;
    END;
}

static egm_cu_result_t fake_cuCtxSynchronize(void)
{
    BEGIN(cuCtxSynchronize);
    if (current_device() < 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    END;
}

/* ---- virtual memory management ------------------------------------------ */

static egm_cu_result_t check_prop(const egm_cu_mem_allocation_prop_t *prop)
{
    if (!prop || prop->type != EGM_CU_MEM_ALLOCATION_TYPE_PINNED || prop->win32_handle_meta_data)
        return EGM_CU_ERROR_INVALID_VALUE;
    if (prop->location.type == EGM_CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(prop->location.id))
        return EGM_CU_ERROR_INVALID_DEVICE;
    if (!valid_location(&prop->location))
        return EGM_CU_ERROR_INVALID_VALUE;
    if (prop->requested_handle_types &
        ~(EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | EGM_CU_MEM_HANDLE_TYPE_FABRIC))
        return EGM_CU_ERROR_INVALID_VALUE;
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t fake_cuMemGetAllocationGranularity(size_t *granularity,
                                                          const egm_cu_mem_allocation_prop_t *prop,
                                                          int option)
{
    BEGIN(cuMemGetAllocationGranularity);
    if (!granularity || (option != EGM_CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != EGM_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = check_prop(prop);
    if (rc == EGM_CU_SUCCESS)
        *granularity = g.granularity;
    END;
}

/* A file of `size` bytes: a named shm object when it must be fabric-exportable
 * (another process opens it by name), else a memfd. */
static egm_cu_result_t create_file(size_t size, int fabric, char *name, int *fd_p)
{
    int fd;
    if (fabric) {
        snprintf(name, FABRIC_NAME_MAX, FABRIC_PREFIX "%ld-%u", (long)getpid(), ++g.fabric_counter);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    } else {
        name[0] = '\0';
        fd = memfd_create(MEMFD_NAME, MFD_CLOEXEC);
    }
    if (fd < 0)
        return EGM_CU_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        if (fabric)
            shm_unlink(name);
        return EGM_CU_ERROR_OUT_OF_MEMORY;
    }
    *fd_p = fd;
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t fake_cuMemCreate(egm_cu_mem_handle_t *handle, size_t size,
                                        const egm_cu_mem_allocation_prop_t *prop,
                                        unsigned long long flags)
{
    BEGIN(cuMemCreate);
    char name[FABRIC_NAME_MAX];
    int fd = -1;
    if (!handle || flags != 0 || size == 0 || size % g.granularity != 0) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = check_prop(prop);
    if (rc != EGM_CU_SUCCESS)
        goto out;
    int fabric = (prop->requested_handle_types & EGM_CU_MEM_HANDLE_TYPE_FABRIC) != 0;
    if (fabric && !g.fabric_supported) {
        rc = EGM_CU_ERROR_NOT_SUPPORTED;
        goto out;
    }
    if (fabric && !g.fabric_permitted) {
        rc = EGM_CU_ERROR_NOT_PERMITTED;
        goto out;
    }
    rc = create_file(size, fabric, name, &fd);
    if (rc != EGM_CU_SUCCESS)
        goto out;
    backing_t *b = backing_new(fd, size, &prop->location, prop->requested_handle_types);
    if (!b) {
        if (fabric)
            shm_unlink(name);
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (fabric) {
        memcpy(b->name, name, sizeof(name));
        b->owner = getpid();
    }
    handle_t *h = handle_new(b, 0);
    if (!h) {
        b->refs = 1;
        backing_put(b);
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    *handle = h->id;
    END;
}

static egm_cu_result_t fake_cuMemRelease(egm_cu_mem_handle_t handle)
{
    BEGIN(cuMemRelease);
    handle_t *h = find_handle(handle);
    if (!h) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    for (handle_t **pp = &g.handles; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    backing_put(h->backing); /* the memory lives on while mapped */
    free(h);
    END;
}

static egm_cu_result_t fake_cuMemAddressReserve(egm_cu_deviceptr_t *ptr, size_t size,
                                                size_t alignment, egm_cu_deviceptr_t addr,
                                                unsigned long long flags)
{
    BEGIN(cuMemAddressReserve);
    size_t align = alignment ? alignment : g.granularity;
    if (!ptr || flags != 0 || size == 0 || size % g.granularity != 0 ||
        (align & (align - 1)) != 0 || size + align < size) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (align < g.granularity)
        align = g.granularity;
    reservation_t *r = calloc(1, sizeof(*r));
    if (!r) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    uintptr_t start = 0;
    if (addr && addr % align == 0) { /* a hint, as for the driver */
        void *p = mmap((void *)addr, size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)addr)
            start = addr;
        else if (p != MAP_FAILED)
            munmap(p, size);
    }
    if (!start) {
        char *p = mmap(NULL, size + align, PROT_NONE, mflags, -1, 0);
        if (p == MAP_FAILED) {
            free(r);
            rc = EGM_CU_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
        if (start > (uintptr_t)p)
            munmap(p, start - (uintptr_t)p);
        size_t tail = (uintptr_t)p + size + align - (start + size);
        if (tail)
            munmap((void *)(start + size), tail);
    }
    r->start = start;
    r->size = size;
    r->next = g.reservations;
    g.reservations = r;
    *ptr = start;
    END;
}

static egm_cu_result_t fake_cuMemAddressFree(egm_cu_deviceptr_t ptr, size_t size)
{
    BEGIN(cuMemAddressFree);
    reservation_t **pp = &g.reservations;
    while (*pp && !((*pp)->start == ptr && (*pp)->size == size))
        pp = &(*pp)->next;
    if (!*pp) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    /* refuse while mapped: the caller would leak the memory behind it */
    for (mapping_t *m = g.mappings; m; m = m->next)
        if (overlaps(ptr, size, m->start, m->size)) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
    reservation_t *r = *pp;
    *pp = r->next;
    munmap((void *)r->start, r->size);
    free(r);
    END;
}

static egm_cu_result_t fake_cuMemMap(egm_cu_deviceptr_t ptr, size_t size, size_t offset,
                                     egm_cu_mem_handle_t handle, unsigned long long flags)
{
    BEGIN(cuMemMap);
    handle_t *h = find_handle(handle);
    reservation_t *r = reservation_at(ptr);
    /* the driver requires offset 0 */
    if (!h || flags != 0 || offset != 0 || size == 0 || size % g.granularity != 0 ||
        ptr % g.granularity != 0 || size > h->backing->size || !r ||
        ptr + size > r->start + r->size) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    for (mapping_t *m = g.mappings; m; m = m->next)
        if (overlaps(ptr, size, m->start, m->size)) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
    mapping_t *m = calloc(1, sizeof(*m));
    if (!m) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    backing_t *b = h->backing;
    m->shadow = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
    if (m->shadow == MAP_FAILED) {
        free(m);
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, b->fd, 0) == MAP_FAILED) {
        munmap(m->shadow, size);
        free(m);
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->start = ptr;
    m->size = size;
    m->backing = b;
    b->refs++;
    m->next = g.mappings;
    g.mappings = m;
    END;
}

static egm_cu_result_t fake_cuMemUnmap(egm_cu_deviceptr_t ptr, size_t size)
{
    BEGIN(cuMemUnmap);
    if (!whole_mappings(ptr, size)) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    /* reserved again, inaccessible */
    if (mmap((void *)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
             -1, 0) == MAP_FAILED) {
        rc = EGM_CU_ERROR_UNKNOWN;
        goto out;
    }
    mapping_t *m = g.mappings;
    while (m) {
        mapping_t *next = m->next;
        if (overlaps(ptr, size, m->start, m->size))
            mapping_drop(m);
        m = next;
    }
    END;
}

static int mapping_prot(const mapping_t *m)
{
    unsigned flags = m->host_flags;
    for (int d = 0; d < EGM_FAKE_CUDA_MAX_DEVICES; d++)
        flags |= m->device_flags[d];
    /* strict: HBM is never CPU-visible (host grants do not exist for it) */
    if (g.strict_device && m->backing->location.type == EGM_CU_MEM_LOCATION_TYPE_DEVICE)
        return PROT_NONE;
    if ((flags & EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return PROT_READ | PROT_WRITE;
    return flags & ACCESS_READ ? PROT_READ : PROT_NONE;
}

static egm_cu_result_t fake_cuMemSetAccess(egm_cu_deviceptr_t ptr, size_t size,
                                           const egm_cu_mem_access_desc_t *desc, size_t count)
{
    BEGIN(cuMemSetAccess);
    if (!desc || count == 0 || !whole_mappings(ptr, size)) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        const egm_cu_mem_access_desc_t *d = &desc[i];
        int host = d->location.type == HOST_LOCATION_TYPE ||
                   d->location.type == EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA;
        if (d->flags != 0 && d->flags != ACCESS_READ &&
            d->flags != EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
        if (d->location.type == EGM_CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(d->location.id)) {
            rc = EGM_CU_ERROR_INVALID_DEVICE;
            goto out;
        }
        if (!host && d->location.type != EGM_CU_MEM_LOCATION_TYPE_DEVICE) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
        if (d->location.type == EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA &&
            (d->location.id < 0 || d->location.id >= g.n_numa)) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
    }
    for (mapping_t *m = g.mappings; m; m = m->next) {
        if (!overlaps(ptr, size, m->start, m->size))
            continue;
        for (size_t i = 0; i < count; i++) {
            if (desc[i].location.type == EGM_CU_MEM_LOCATION_TYPE_DEVICE)
                m->device_flags[desc[i].location.id] = (unsigned char)desc[i].flags;
            else
                m->host_flags = (unsigned char)desc[i].flags;
        }
        if (mprotect((void *)m->start, m->size, mapping_prot(m)) != 0)
            rc = EGM_CU_ERROR_UNKNOWN;
    }
    END;
}

static void fabric_handle_fill(egm_cu_fabric_handle_t *fh, const backing_t *b)
{
    uint64_t size = b->size;
    uint32_t magic = FABRIC_MAGIC;
    int32_t loc[2] = {b->location.type, b->location.id};
    memset(fh, 0, sizeof(*fh));
    memcpy(fh->data, b->name, FABRIC_NAME_MAX);
    memcpy(fh->data + 40, &size, 8);
    memcpy(fh->data + 48, &magic, 4);
    memcpy(fh->data + 52, loc, 8);
}

static egm_cu_result_t fake_cuMemExportToShareableHandle(void *shareable_handle,
                                                         egm_cu_mem_handle_t handle,
                                                         int handle_type, unsigned long long flags)
{
    BEGIN(cuMemExportToShareableHandle);
    handle_t *h = find_handle(handle);
    if (!shareable_handle || !h || flags != 0) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    backing_t *b = h->backing;
    if (handle_type == EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
        (b->handle_types & EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        int fd = fcntl(b->fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        else
            *(int *)shareable_handle = fd;
    } else if (handle_type == EGM_CU_MEM_HANDLE_TYPE_FABRIC &&
               (b->handle_types & EGM_CU_MEM_HANDLE_TYPE_FABRIC) && b->name[0]) {
        fabric_handle_fill(shareable_handle, b);
    } else {
        rc = EGM_CU_ERROR_INVALID_VALUE;
    }
    END;
}

/* Only files the fake made are importable (the driver refuses foreign fds). */
static int fake_made(int fd)
{
    char link[64], target[256];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return strncmp(target, "/memfd:" MEMFD_NAME, strlen("/memfd:" MEMFD_NAME)) == 0 ||
           strncmp(target, "/dev/shm" FABRIC_PREFIX, strlen("/dev/shm" FABRIC_PREFIX)) == 0;
}

static egm_cu_result_t import_fd(int fd, const egm_cu_mem_location_t *loc, int types,
                                 const char *name, size_t expect_size, handle_t **h_p)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (size_t)st.st_size % g.granularity != 0 ||
        (expect_size && (size_t)st.st_size != expect_size))
        return EGM_CU_ERROR_INVALID_VALUE;
    backing_t *b = backing_by_inode(st.st_dev, st.st_ino);
    if (!b) {
        int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dup_fd < 0)
            return EGM_CU_ERROR_OUT_OF_MEMORY;
        b = backing_new(dup_fd, (size_t)st.st_size, loc, types);
        if (!b)
            return EGM_CU_ERROR_OUT_OF_MEMORY;
        if (name)
            snprintf(b->name, sizeof(b->name), "%s", name); /* owner 0: not ours to unlink */
    }
    *h_p = handle_new(b, 1);
    if (!*h_p) {
        if (b->refs == 0) {
            b->refs = 1;
            backing_put(b);
        }
        return EGM_CU_ERROR_OUT_OF_MEMORY;
    }
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t fake_cuMemImportFromShareableHandle(egm_cu_mem_handle_t *handle,
                                                           void *os_handle, int handle_type)
{
    BEGIN(cuMemImportFromShareableHandle);
    handle_t *h = NULL;
    if (!handle) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (handle_type == EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        int fd = (int)(intptr_t)os_handle;
        /* location unknown to an importer; pointer attributes say device 0 */
        egm_cu_mem_location_t loc = {EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
        if (fd < 0 || !fake_made(fd)) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
        rc = import_fd(fd, &loc, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, 0, &h);
    } else if (handle_type == EGM_CU_MEM_HANDLE_TYPE_FABRIC) {
        const egm_cu_fabric_handle_t *fh = os_handle;
        char name[FABRIC_NAME_MAX];
        uint64_t size;
        uint32_t magic;
        int32_t loc_raw[2];
        if (!fh) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
        memcpy(name, fh->data, FABRIC_NAME_MAX);
        memcpy(&size, fh->data + 40, 8);
        memcpy(&magic, fh->data + 48, 4);
        memcpy(loc_raw, fh->data + 52, 8);
        if (magic != FABRIC_MAGIC || memchr(name, '\0', sizeof(name)) == NULL ||
            strncmp(name, FABRIC_PREFIX, strlen(FABRIC_PREFIX)) != 0 ||
            strchr(name + 1, '/') != NULL || size == 0) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
        int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) { /* exporter released it (or never existed) */
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
        egm_cu_mem_location_t loc = {loc_raw[0], loc_raw[1]};
        rc = import_fd(fd, &loc, EGM_CU_MEM_HANDLE_TYPE_FABRIC, name, size, &h);
        close(fd);
    } else {
        rc = EGM_CU_ERROR_INVALID_VALUE;
    }
    if (rc == EGM_CU_SUCCESS)
        *handle = h->id;
    END;
}

/* ---- pointers and plain allocations ------------------------------------- */

static egm_cu_result_t fake_cuPointerGetAttribute(void *data, int attribute, egm_cu_deviceptr_t ptr)
{
    BEGIN(cuPointerGetAttribute);
    unsigned memtype;
    int ordinal;
    uintptr_t start;
    size_t size;
    if (!data) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    mapping_t *m = mapping_at(ptr);
    range_t *r = m ? NULL : range_at(ptr);
    if (m) {
        memtype = EGM_CU_MEMORYTYPE_DEVICE;
        ordinal = m->backing->location.type == EGM_CU_MEM_LOCATION_TYPE_DEVICE
                      ? m->backing->location.id
                      : 0;
        start = m->start;
        size = m->size;
    } else if (r) {
        memtype = r->kind == RANGE_DEVICE ? EGM_CU_MEMORYTYPE_DEVICE : EGM_CU_MEMORYTYPE_HOST;
        ordinal = r->device;
        start = r->start;
        size = r->size;
    } else {
        rc = EGM_CU_ERROR_INVALID_VALUE; /* pageable memory, or reserved and not mapped */
        goto out;
    }
    if (!valid_device(ordinal))
        ordinal = 0;
    switch (attribute) {
    case EGM_CU_POINTER_ATTRIBUTE_CONTEXT:
        *(egm_cu_context_t *)data = &g_ctx[ordinal];
        break;
    case EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = memtype;
        break;
    case EGM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = ordinal;
        break;
    case EGM_CU_POINTER_ATTRIBUTE_DEVICE_POINTER: /* unified addressing: the same address */
        *(egm_cu_deviceptr_t *)data = ptr;
        break;
    case EGM_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(egm_cu_deviceptr_t *)data = start;
        break;
    case EGM_CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = size;
        break;
    default:
        rc = EGM_CU_ERROR_INVALID_VALUE;
        break;
    }
    END;
}

static egm_cu_result_t range_add(int kind, uintptr_t start, size_t size, size_t map_len, int device,
                                 char *shadow)
{
    range_t *r = calloc(1, sizeof(*r));
    if (!r)
        return EGM_CU_ERROR_OUT_OF_MEMORY;
    r->kind = kind;
    r->start = start;
    r->size = size;
    r->map_len = map_len;
    r->device = device;
    r->shadow = shadow;
    r->next = g.ranges;
    g.ranges = r;
    return EGM_CU_SUCCESS;
}

static size_t page_round(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (size + page - 1) / page * page;
}

static egm_cu_result_t fake_cuMemAlloc(egm_cu_deviceptr_t *ptr, size_t size)
{
    BEGIN(cuMemAlloc);
    int device = current_device();
    char *addr = MAP_FAILED, *shadow = MAP_FAILED;
    size_t len = page_round(size);
    if (!ptr || size == 0 || len < size) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    /* two views of one file: the "device" address, and the fake's own */
    int fd = memfd_create(MEMFD_NAME "-hbm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        if (fd >= 0)
            close(fd);
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    addr = mmap(NULL, len, g.strict_device ? PROT_NONE : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    shadow = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (addr == MAP_FAILED || shadow == MAP_FAILED ||
        range_add(RANGE_DEVICE, (uintptr_t)addr, size, len, device, shadow) != EGM_CU_SUCCESS) {
        if (addr != MAP_FAILED)
            munmap(addr, len);
        if (shadow != MAP_FAILED)
            munmap(shadow, len);
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    *ptr = (uintptr_t)addr;
    END;
}

static egm_cu_result_t free_range(uintptr_t ptr, int kind, egm_cu_result_t not_found)
{
    range_t *r = range_at(ptr);
    if (!r || r->start != ptr || r->kind != kind)
        return not_found;
    range_drop(r);
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t fake_cuMemFree(egm_cu_deviceptr_t ptr)
{
    BEGIN(cuMemFree);
    if (current_device() < 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    else
        rc = free_range(ptr, RANGE_DEVICE, EGM_CU_ERROR_INVALID_VALUE);
    END;
}

static egm_cu_result_t fake_cuMemAllocHost(void **ptr, size_t size)
{
    BEGIN(cuMemAllocHost);
    int device = current_device();
    size_t len = page_round(size);
    if (!ptr || size == 0 || len < size) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    rc = range_add(RANGE_HOST_ALLOC, (uintptr_t)p, size, len, device, NULL);
    if (rc != EGM_CU_SUCCESS) {
        munmap(p, len);
        goto out;
    }
    *ptr = p;
    END;
}

static egm_cu_result_t fake_cuMemFreeHost(void *ptr)
{
    BEGIN(cuMemFreeHost);
    if (current_device() < 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    else
        rc = free_range((uintptr_t)ptr, RANGE_HOST_ALLOC, EGM_CU_ERROR_INVALID_VALUE);
    END;
}

static egm_cu_result_t fake_cuMemHostRegister(void *ptr, size_t size, unsigned int flags)
{
    BEGIN(cuMemHostRegister);
    int device = current_device();
    uintptr_t a = (uintptr_t)ptr;
    if (!ptr || size == 0 || a + size < a || (flags & ~EGM_CU_MEMHOSTREGISTER_PORTABLE)) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    for (range_t *r = g.ranges; r; r = r->next)
        if (overlaps(a, size, r->start, r->size)) {
            rc = EGM_FAKE_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            goto out;
        }
    for (reservation_t *r = g.reservations; r; r = r->next)
        if (overlaps(a, size, r->start, r->size)) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
    rc = range_add(RANGE_HOST_REGISTERED, a, size, size, device, NULL);
    END;
}

static egm_cu_result_t fake_cuMemHostUnregister(void *ptr)
{
    BEGIN(cuMemHostUnregister);
    if (current_device() < 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    else
        rc = free_range((uintptr_t)ptr, RANGE_HOST_REGISTERED,
                        EGM_FAKE_CU_ERROR_HOST_MEMORY_NOT_REGISTERED);
    END;
}

/* ---- copies --------------------------------------------------------------- */

static egm_cu_result_t fake_cuMemcpy(egm_cu_deviceptr_t dst, egm_cu_deviceptr_t src, size_t size)
{
    BEGIN(cuMemcpy);
    int device = current_device();
    if (device < 0)
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
    else
        rc = copy_checked(dst, src, size, device, MODE_ENGINE);
    END;
}

static egm_cu_result_t fake_cuMemcpyAsync(egm_cu_deviceptr_t dst, egm_cu_deviceptr_t src,
                                          size_t size, egm_cu_stream_t stream)
{
    BEGIN(cuMemcpyAsync);
    int device;
    rc = stream_device(stream, &device);
    if (rc == EGM_CU_SUCCESS)
        rc = copy_checked(dst, src, size, device, MODE_ENGINE);
    END;
}

static egm_cu_result_t fake_cuMemcpyBatchAsync(egm_cu_deviceptr_t *dsts, egm_cu_deviceptr_t *srcs,
                                               size_t *sizes, size_t count,
                                               egm_cu_memcpy_attributes_t *attrs, size_t *attr_idxs,
                                               size_t num_attrs, egm_cu_stream_t stream)
{
    BEGIN(cuMemcpyBatchAsync);
    int device;
    /* the legacy NULL stream is not allowed for batches */
    if (!dsts || !srcs || !sizes || count == 0 || !attrs || !attr_idxs || num_attrs == 0 ||
        num_attrs > count || attr_idxs[0] != 0 || !stream) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < num_attrs; i++) {
        if ((i > 0 && attr_idxs[i] <= attr_idxs[i - 1]) || attr_idxs[i] >= count ||
            attrs[i].src_access_order < EGM_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
            attrs[i].src_access_order > SRC_ACCESS_ORDER_ANY) {
            rc = EGM_CU_ERROR_INVALID_VALUE;
            goto out;
        }
    }
    rc = stream_device(stream, &device);
    if (rc != EGM_CU_SUCCESS)
        goto out;
    for (size_t i = 0; i < count && rc == EGM_CU_SUCCESS; i++)
        rc = transfer(dsts[i], srcs[i], sizes[i], device, MODE_ENGINE, 0);
    for (size_t i = 0; i < count && rc == EGM_CU_SUCCESS; i++)
        rc = transfer(dsts[i], srcs[i], sizes[i], device, MODE_ENGINE, 1);
    END;
}

static egm_cu_result_t fake_cuMemsetD8(egm_cu_deviceptr_t dst, unsigned char value, size_t count)
{
    BEGIN(cuMemsetD8);
    int device = current_device();
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    if (dst + count < dst) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    for (int pass = 0; pass < 2 && rc == EGM_CU_SUCCESS; pass++) {
        uintptr_t a = dst;
        size_t left = count;
        while (left > 0) {
            piece_t p;
            rc = resolve(a, left, device, MODE_ENGINE, 1, &p);
            if (rc != EGM_CU_SUCCESS)
                break;
            if (pass == 1) {
                memset(p.host, value, p.len);
                g.bytes_copied += p.len;
            }
            a += p.len;
            left -= p.len;
        }
    }
    END;
}

/* ---- streams and events --------------------------------------------------- */

static egm_cu_result_t fake_cuStreamCreateWithPriority(egm_cu_stream_t *stream, unsigned int flags,
                                                       int priority)
{
    BEGIN(cuStreamCreateWithPriority);
    int device = current_device();
    if (!stream || (flags & ~(unsigned)EGM_CU_STREAM_NON_BLOCKING)) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    struct egm_cu_stream_st *s = calloc(1, sizeof(*s));
    if (!s) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* the driver clamps priorities to its range */
    if (priority > PRIORITY_LEAST)
        priority = PRIORITY_LEAST;
    if (priority < PRIORITY_GREATEST)
        priority = PRIORITY_GREATEST;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    s->next = g.streams;
    g.streams = s;
    *stream = s;
    END;
}

static egm_cu_result_t fake_cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    BEGIN(cuCtxGetStreamPriorityRange);
    if (current_device() < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    if (least)
        *least = PRIORITY_LEAST;
    if (greatest)
        *greatest = PRIORITY_GREATEST;
    END;
}

static egm_cu_result_t fake_cuStreamDestroy(egm_cu_stream_t stream)
{
    BEGIN(cuStreamDestroy);
    struct egm_cu_stream_st **pp = &g.streams;
    while (*pp && *pp != stream)
        pp = &(*pp)->next;
    if (!stream || !*pp) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    *pp = stream->next;
    free(stream);
    END;
}

static egm_cu_result_t fake_cuStreamSynchronize(egm_cu_stream_t stream)
{
    BEGIN(cuStreamSynchronize);
    int device;
    rc = stream_device(stream, &device); /* work ran at submission */
    END;
}

/* Work runs at submission, so there is nothing to wait for: the arguments are
 * checked as the driver does (an event of another context is refused). */
static egm_cu_result_t fake_cuStreamWaitEvent(egm_cu_stream_t stream, egm_cu_event_t event,
                                              unsigned int flags)
{
    BEGIN(cuStreamWaitEvent);
    struct egm_cu_event_st *e = find_event(event);
    int device;
    if (!e) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (flags != 0) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = stream_device(stream, &device);
    if (rc != EGM_CU_SUCCESS)
        goto out;
    if (device != e->device)
        rc = EGM_CU_ERROR_INVALID_HANDLE;
    END;
}

static egm_cu_result_t fake_cuEventCreate(egm_cu_event_t *event, unsigned int flags)
{
    BEGIN(cuEventCreate);
    int device = current_device();
    if (!event || (flags & ~0x7u)) { /* DEFAULT, BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS */
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    struct egm_cu_event_st *e = calloc(1, sizeof(*e));
    if (!e) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    e->device = device;
    e->flags = flags;
    e->next = g.events;
    g.events = e;
    *event = e;
    END;
}

static egm_cu_result_t fake_cuEventRecord(egm_cu_event_t event, egm_cu_stream_t stream)
{
    BEGIN(cuEventRecord);
    struct egm_cu_event_st *e = find_event(event);
    int device;
    if (!e) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    rc = stream_device(stream, &device);
    if (rc != EGM_CU_SUCCESS)
        goto out;
    if (device != e->device) { /* event and stream of different contexts */
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    e->recorded = 1;
    clock_gettime(CLOCK_MONOTONIC, &e->when);
    END;
}

static egm_cu_result_t fake_cuEventSynchronize(egm_cu_event_t event)
{
    BEGIN(cuEventSynchronize);
    if (!find_event(event))
        rc = EGM_CU_ERROR_INVALID_HANDLE;
    END;
}

static egm_cu_result_t fake_cuEventQuery(egm_cu_event_t event)
{
    BEGIN(cuEventQuery);
    if (!find_event(event))
        rc = EGM_CU_ERROR_INVALID_HANDLE;
    END;
}

static egm_cu_result_t fake_cuEventDestroy(egm_cu_event_t event)
{
    BEGIN(cuEventDestroy);
    struct egm_cu_event_st **pp = &g.events;
    while (*pp && *pp != event)
        pp = &(*pp)->next;
    if (!event || !*pp) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    *pp = event->next;
    free(event);
    END;
}

static egm_cu_result_t fake_cuEventElapsedTime(float *ms, egm_cu_event_t start, egm_cu_event_t end)
{
    BEGIN(cuEventElapsedTime);
    struct egm_cu_event_st *a = find_event(start), *b = find_event(end);
    if (!ms) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!a || !b || (a->flags & EGM_CU_EVENT_DISABLE_TIMING) ||
        (b->flags & EGM_CU_EVENT_DISABLE_TIMING)) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (!a->recorded || !b->recorded) {
        rc = EGM_CU_ERROR_NOT_READY;
        goto out;
    }
    double d = (double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
               (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6;
    *ms = d > 0.001 ? (float)d : 0.001f;
    END;
}

/* ---- modules and the copy kernel ----------------------------------------- */

static egm_cu_result_t fake_cuModuleLoadData(egm_cu_module_t *module, const void *image)
{
    BEGIN(cuModuleLoadData);
    int device = current_device();
    if (!module || !image) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (device < 0) {
        rc = EGM_FAKE_CU_ERROR_INVALID_CONTEXT;
        goto out;
    }
    struct egm_cu_module_st *m = calloc(1, sizeof(*m));
    if (!m) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->device = device;
    m->copy_blocks.module = m;
    m->next = g.modules;
    g.modules = m;
    *module = m;
    END;
}

static egm_cu_result_t fake_cuModuleUnload(egm_cu_module_t module)
{
    BEGIN(cuModuleUnload);
    struct egm_cu_module_st **pp = &g.modules;
    while (*pp && *pp != module)
        pp = &(*pp)->next;
    if (!module || !*pp) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    *pp = module->next;
    free(module);
    END;
}

static egm_cu_result_t fake_cuModuleGetFunction(egm_cu_function_t *func, egm_cu_module_t module,
                                                const char *name)
{
    BEGIN(cuModuleGetFunction);
    struct egm_cu_module_st *m = find_module(module);
    if (!func || !name) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!m) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (strcmp(name, EGM_KERNEL_COPY_BLOCKS) != 0) {
        rc = EGM_CU_ERROR_NOT_FOUND;
        goto out;
    }
    *func = &m->copy_blocks;
    END;
}

static egm_cu_result_t fake_cuLaunchKernel(egm_cu_function_t func, unsigned grid_x, unsigned grid_y,
                                           unsigned grid_z, unsigned block_x, unsigned block_y,
                                           unsigned block_z, unsigned shared_bytes,
                                           egm_cu_stream_t stream, void **params, void **extra)
{
    BEGIN(cuLaunchKernel);
    egm_copy_desc_t *descs = NULL;
    struct egm_cu_module_st *m = NULL;
    int device;
    for (struct egm_cu_module_st *p = g.modules; p; p = p->next)
        if (func == &p->copy_blocks)
            m = p;
    if (!m) {
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (!grid_x || !grid_y || !grid_z || !block_x || !block_y || !block_z ||
        (uint64_t)block_x * block_y * block_z > 1024 || shared_bytes > 228 * 1024 || extra ||
        !params || !params[0] || !params[1]) {
        rc = EGM_CU_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = stream_device(stream, &device);
    if (rc != EGM_CU_SUCCESS)
        goto out;
    if (device != m->device) { /* module loaded in another context */
        rc = EGM_CU_ERROR_INVALID_HANDLE;
        goto out;
    }
    uintptr_t descs_addr = (uintptr_t) * (const egm_copy_desc_t *const *)params[0];
    uint32_t count = *(const uint32_t *)params[1];
    g.kernel_launches++;
    if (count == 0)
        goto out;
    size_t bytes = (size_t)count * sizeof(egm_copy_desc_t);
    descs = malloc(bytes);
    if (!descs) {
        rc = EGM_CU_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* the kernel reads its descriptors from device-accessible memory */
    rc = check_span(descs_addr, bytes, device, MODE_KERNEL, 0);
    if (rc == EGM_CU_SUCCESS)
        rc = transfer((uintptr_t)descs, descs_addr, bytes, device, MODE_ENGINE, 1);
    g.bytes_copied -= rc == EGM_CU_SUCCESS ? bytes : 0; /* descriptors are not payload */
    for (uint32_t i = 0; i < count && rc == EGM_CU_SUCCESS; i++)
        rc = transfer(descs[i].dst, descs[i].src, descs[i].len, device, MODE_KERNEL, 0);
    for (uint32_t i = 0; i < count && rc == EGM_CU_SUCCESS; i++)
        rc = transfer(descs[i].dst, descs[i].src, descs[i].len, device, MODE_KERNEL, 1);
    free(descs);
    END;
}

/* ---- the table and test controls ---------------------------------------- */

static const egm_cuda_api_t fake_api = {
#define X(fn) .fn = fake_##fn,
    EGM_FAKE_CUDA_FUNCTIONS(X)
#undef X
};

const egm_cuda_api_t *egm_fake_cuda_api(void)
{
    pthread_once(&g_once, init_once);
    return &fake_api;
}

/* Names left in /dev/shm by fake drivers of processes that died. */
static void sweep_dead_fabric_names(void)
{
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return;
    struct dirent *de;
    const char *prefix = FABRIC_PREFIX + 1;
    while ((de = readdir(dir)) != NULL) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
            continue;
        long pid = strtol(de->d_name + strlen(prefix), NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            char name[sizeof(de->d_name) + 2];
            snprintf(name, sizeof(name), "/%s", de->d_name);
            shm_unlink(name);
        }
    }
    closedir(dir);
}

void egm_fake_cuda_reset(int n_devices, int n_numa_nodes)
{
    if (n_devices < 0 || n_devices > EGM_FAKE_CUDA_MAX_DEVICES || n_numa_nodes < 1 ||
        n_numa_nodes > EGM_FAKE_CUDA_MAX_NUMA_NODES) {
        fprintf(stderr, "fake_cuda: reset(%d, %d) out of range\n", n_devices, n_numa_nodes);
        abort();
    }
    lock();
    while (g.mappings)
        mapping_drop(g.mappings);
    while (g.reservations) {
        reservation_t *r = g.reservations;
        g.reservations = r->next;
        munmap((void *)r->start, r->size);
        free(r);
    }
    while (g.handles) {
        handle_t *h = g.handles;
        g.handles = h->next;
        backing_put(h->backing);
        free(h);
    }
    while (g.backings) { /* none left normally; be sure no file stays open */
        g.backings->refs = 1;
        backing_put(g.backings);
    }
    while (g.ranges)
        range_drop(g.ranges);
    while (g.streams) {
        struct egm_cu_stream_st *s = g.streams;
        g.streams = s->next;
        free(s);
    }
    while (g.events) {
        struct egm_cu_event_st *e = g.events;
        g.events = e->next;
        free(e);
    }
    while (g.modules) {
        struct egm_cu_module_st *m = g.modules;
        g.modules = m->next;
        free(m);
    }
    g.n_devices = n_devices;
    g.n_numa = n_numa_nodes;
    g.granularity = DEFAULT_GRANULARITY;
    g.fabric_supported = 1;
    g.fabric_permitted = 1;
    g.strict_device = 0;
    g.n_overrides = 0;
    g.n_rules = 0;
    g.fired = 0;
    memset(g.calls, 0, sizeof(g.calls));
    g.kernel_launches = 0;
    g.bytes_copied = 0;
    sweep_dead_fabric_names();
    unlock();
}

void egm_fake_cuda_set_granularity(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes == 0 || (bytes & (bytes - 1)) != 0 || bytes % page != 0) {
        fprintf(stderr, "fake_cuda: granularity %zu is not a power-of-two multiple of pages\n",
                bytes);
        abort();
    }
    lock();
    g.granularity = bytes;
    unlock();
}

void egm_fake_cuda_set_fabric(int supported, int permitted)
{
    lock();
    g.fabric_supported = supported ? 1 : 0;
    g.fabric_permitted = permitted ? 1 : 0;
    unlock();
}

void egm_fake_cuda_set_attribute(int device, int attribute, int value)
{
    lock();
    if (g.n_overrides == MAX_OVERRIDES) {
        fprintf(stderr, "fake_cuda: too many attribute overrides\n");
        abort();
    }
    g.overrides[g.n_overrides++] = (override_t){device, attribute, value};
    unlock();
}

void egm_fake_cuda_set_strict_device_memory(int on)
{
    lock();
    g.strict_device = on ? 1 : 0;
    unlock();
}

#define COUNT_LIST(type, head, counter, cond)                                                      \
    for (type *p_ = (head); p_; p_ = p_->next)                                                     \
        if (cond)                                                                                  \
    (counter)++

egm_fake_cuda_counters_t egm_fake_cuda_counters(void)
{
    egm_fake_cuda_counters_t c;
    memset(&c, 0, sizeof(c));
    lock();
    pid_t self = getpid();
    COUNT_LIST(handle_t, g.handles, c.allocations, !p_->imported);
    COUNT_LIST(handle_t, g.handles, c.imports, p_->imported);
    COUNT_LIST(reservation_t, g.reservations, c.reservations, 1);
    COUNT_LIST(mapping_t, g.mappings, c.mappings, 1);
    COUNT_LIST(backing_t, g.backings, c.memory_objects, 1);
    COUNT_LIST(backing_t, g.backings, c.fabric_names, p_->name[0] && p_->owner == self);
    COUNT_LIST(range_t, g.ranges, c.device_allocations, p_->kind == RANGE_DEVICE);
    COUNT_LIST(range_t, g.ranges, c.pinned_host, p_->kind == RANGE_HOST_ALLOC);
    COUNT_LIST(range_t, g.ranges, c.host_registrations, p_->kind == RANGE_HOST_REGISTERED);
    COUNT_LIST(struct egm_cu_stream_st, g.streams, c.streams, 1);
    COUNT_LIST(struct egm_cu_event_st, g.events, c.events, 1);
    COUNT_LIST(struct egm_cu_module_st, g.modules, c.modules, 1);
    for (int d = 0; d < EGM_FAKE_CUDA_MAX_DEVICES; d++)
        c.primary_ctx_refs += g_ctx[d].retain;
    c.kernel_launches = g.kernel_launches;
    c.bytes_copied = g.bytes_copied;
    for (int i = 0; i < FN_COUNT; i++) {
        c.calls[i] = g.calls[i];
        c.calls_total += g.calls[i];
    }
    unlock();
    return c;
}

uint64_t egm_fake_cuda_live_objects(void)
{
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    return c.allocations + c.imports + c.reservations + c.mappings + c.memory_objects +
           c.fabric_names + c.device_allocations + c.pinned_host + c.host_registrations +
           c.streams + c.events + c.modules;
}

void egm_fake_cuda_fail(const char *function, unsigned nth, egm_cu_result_t error)
{
    int fn = fn_index(function);
    if (error == EGM_CU_SUCCESS) {
        fprintf(stderr, "fake_cuda: injected error for %s must not be CUDA_SUCCESS\n", function);
        abort();
    }
    lock();
    if (g.n_rules == MAX_RULES) {
        fprintf(stderr, "fake_cuda: too many failure rules\n");
        abort();
    }
    g.rules[g.n_rules++] = (rule_t){fn, nth, error};
    unlock();
}

void egm_fake_cuda_clear_failures(void)
{
    lock();
    g.n_rules = 0;
    g.fired = 0;
    unlock();
}

size_t egm_fake_cuda_failures_fired(void)
{
    lock();
    size_t n = (size_t)g.fired;
    unlock();
    return n;
}

size_t egm_fake_cuda_calls_at_first_failure(const char *function)
{
    int fn = fn_index(function);
    lock();
    size_t n = g.fired ? (size_t)g.calls_at_fault[fn] : 0;
    unlock();
    return n;
}

size_t egm_fake_cuda_calls(const char *function)
{
    int fn = fn_index(function);
    lock();
    size_t n = (size_t)g.calls[fn];
    unlock();
    return n;
}

void egm_fake_cuda_clear_calls(void)
{
    lock();
    memset(g.calls, 0, sizeof(g.calls));
    unlock();
}

size_t egm_fake_cuda_called(const char **names, size_t max)
{
    size_t n = 0;
    lock();
    for (int i = 0; i < FN_COUNT; i++) {
        if (g.calls[i] == 0)
            continue;
        if (names && n < max)
            names[n] = fn_names[i];
        n++;
    }
    unlock();
    return n;
}

const char *egm_fake_cuda_function_name(size_t i)
{
    return i < FN_COUNT ? fn_names[i] : NULL;
}

void *egm_fake_cuda_host_view(egm_cu_deviceptr_t ptr, size_t len)
{
    piece_t p;
    void *view = NULL;
    lock();
    if (len > 0 && resolve(ptr, len, -1, MODE_VIEW, 0, &p) == EGM_CU_SUCCESS && p.len == len)
        view = p.host;
    unlock();
    return view;
}
