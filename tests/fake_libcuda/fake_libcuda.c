/* libcuda.so.1 for machines without a GPU: the fake driver (tests/support/
 * fake_cuda.c) behind the two entry points src/cuda/driver.c looks up with
 * dlsym, so that real processes (integration tests, the CLI, daemons) run their
 * GPU paths on host memory when started with LD_LIBRARY_PATH=$EGM_FAKE_CUDA_DIR.
 *
 * Configured from the environment once, when the library is loaded:
 *   EGM_FAKE_CUDA_DEVICES      0..16 GPUs (default 2)
 *   EGM_FAKE_CUDA_NUMA_NODES   1..16 host NUMA nodes (default 1)
 *   EGM_FAKE_CUDA_GRANULARITY  VMM granularity in bytes, a power of two and a
 *                              multiple of the page size (default 2097152)
 *   EGM_FAKE_CUDA_FABRIC       1: fabric handles permitted (default); 0: cuMemCreate
 *                              with FABRIC answers NOT_PERMITTED (H200 without IMEX)
 *   EGM_FAKE_CUDA_FAIL         func:nth:error[,...]: the nth call (1-based, 0 =
 *                              every call) of func answers error (a number or a
 *                              CUDA_ERROR_* name)
 *   EGM_FAKE_CUDA_REPORT       path ("%p" = pid) written at exit with the live-object
 *                              counters as "name value" lines, and
 *                              fds_opened_since_load: descriptors opened after the
 *                              library was loaded and still open at exit
 * A malformed value aborts the process with a message on stderr: a typo must
 * not make a test pass. Only cuGetProcAddress(_v2) are exported (version script). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

#define SYMBOL_FOUND 0     /* CU_GET_PROC_ADDRESS_SUCCESS */
#define SYMBOL_NOT_FOUND 1 /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
#define MAX_CU_ERROR 1000  /* CUresult values the name lookup scans */
#define REPORT_PATH_MAX 4096

EXPORT egm_cu_result_t cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                           uint64_t flags, int *symbol_status);
EXPORT egm_cu_result_t cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                        uint64_t flags);

static pid_t load_pid;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fake libcuda.so.1: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* The whole of `text` as a decimal number in [min, max]; -1 when it is not. */
static int parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *value_p)
{
    if (text == NULL || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *value_p = v;
    return 0;
}

static int env_int(const char *name, int min, int max, int fallback)
{
    const char *text = getenv(name);
    uint64_t v;
    if (text == NULL)
        return fallback;
    if (parse_u64(text, (uint64_t)min, (uint64_t)max, &v) != 0)
        die("%s=\"%s\": expected an integer %d..%d", name, text, min, max);
    return (int)v;
}

static int function_index(const char *name)
{
    const char *fn;
    for (size_t i = 0; (fn = egm_fake_cuda_function_name(i)) != NULL; i++)
        if (strcmp(fn, name) == 0)
            return (int)i;
    return -1;
}

/* A CUresult from a number or a name the fake knows ("CUDA_ERROR_OUT_OF_MEMORY"). */
static egm_cu_result_t parse_error(const char *rule, const char *text)
{
    uint64_t v;
    if (parse_u64(text, 1, INT32_MAX, &v) == 0)
        return (egm_cu_result_t)v;
    const egm_cuda_api_t *api = egm_fake_cuda_api();
    for (egm_cu_result_t rc = 1; rc < MAX_CU_ERROR; rc++) {
        const char *name = NULL;
        if (api->cuGetErrorName(rc, &name) == EGM_CU_SUCCESS && name != NULL &&
            strcmp(name, text) == 0)
            return rc;
    }
    die("EGM_FAKE_CUDA_FAIL rule \"%s\": error \"%s\" is neither a CUresult > 0 nor a "
        "CUDA_ERROR_* name the fake knows",
        rule, text);
}

/* Every rule is checked before any is applied (apply 0), then applied. */
static void apply_failures(const char *spec, int apply)
{
    char *copy = strdup(spec);
    if (copy == NULL)
        die("out of memory");
    for (char *rule = copy, *next; rule != NULL; rule = next) {
        next = strchr(rule, ',');
        if (next != NULL)
            *next++ = '\0';
        char *first = strchr(rule, ':');
        char *second = first ? strchr(first + 1, ':') : NULL;
        if (second == NULL || strchr(second + 1, ':') != NULL)
            die("EGM_FAKE_CUDA_FAIL=\"%s\": rule \"%s\" is not function:nth:error", spec, rule);
        *first = '\0';
        *second = '\0';
        uint64_t nth;
        if (function_index(rule) < 0)
            die("EGM_FAKE_CUDA_FAIL: unknown function \"%s\" (a cu* name of the driver table)",
                rule);
        if (parse_u64(first + 1, 0, UINT32_MAX, &nth) != 0)
            die("EGM_FAKE_CUDA_FAIL rule for %s: nth \"%s\" is not an integer >= 0", rule,
                first + 1);
        egm_cu_result_t error = parse_error(rule, second + 1);
        if (apply)
            egm_fake_cuda_fail(rule, (unsigned)nth, error);
    }
    free(copy);
}

/* "%p" in the path becomes the pid, so that several processes can report. */
static int report_path(char *path, size_t len)
{
    const char *spec = getenv("EGM_FAKE_CUDA_REPORT");
    size_t n = 0;
    if (spec == NULL || spec[0] == '\0')
        return -1;
    for (const char *p = spec; *p != '\0'; p++) {
        int w;
        if (p[0] == '%' && p[1] == 'p') {
            w = snprintf(path + n, len - n, "%d", (int)getpid());
            p++;
        } else {
            w = snprintf(path + n, len - n, "%c", *p);
        }
        if (w < 0 || (size_t)w >= len - n)
            return -1;
        n += (size_t)w;
    }
    return 0;
}

/* Descriptors open when the library was loaded (inherited ones, the
 * process's own early ones): not counted at exit. */
#define FD_SNAPSHOT_MAX 4096
static unsigned char fds_at_load[FD_SNAPSHOT_MAX / 8];

/* Calls fn(fd, arg) for every open descriptor but the directory's own. */
static void each_fd(void (*fn)(long fd, void *arg), void *arg)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (e->d_name[0] != '.' && *end == '\0' && fd != dirfd(d))
            fn(fd, arg);
    }
    closedir(d);
}

static void remember_fd(long fd, void *arg)
{
    (void)arg;
    if (fd >= 0 && fd < FD_SNAPSHOT_MAX)
        fds_at_load[fd / 8] |= (unsigned char)(1u << (fd % 8));
}

typedef struct {
    long skip; /* the report being written */
    unsigned long count;
} new_fds_t;

static void count_new_fd(long fd, void *arg)
{
    new_fds_t *n = arg;
    if (fd != n->skip && (fd >= FD_SNAPSHOT_MAX || !(fds_at_load[fd / 8] & (1u << (fd % 8)))))
        n->count++;
}

/* Descriptors opened since the library was loaded and still open: what a
 * process that shut down cleanly should not hold any more. */
static unsigned long fds_opened_since_load(int skip)
{
    new_fds_t n = {.skip = skip};
    each_fd(count_new_fd, &n);
    return n.count;
}

/* Written to a temporary name and renamed, so a reader never sees half a report. */
static void write_report(void)
{
    char path[REPORT_PATH_MAX], tmp[REPORT_PATH_MAX + 32];
    if (getpid() != load_pid || report_path(path, sizeof(path)) != 0)
        return; /* a forked child's counters are a copy of its parent's */
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "fake libcuda.so.1: EGM_FAKE_CUDA_REPORT %s: %s\n", tmp, strerror(errno));
        return;
    }
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    fprintf(f,
            "allocations %" PRIu64 "\nimports %" PRIu64 "\nreservations %" PRIu64
            "\nmappings %" PRIu64 "\nmemory_objects %" PRIu64 "\nfabric_names %" PRIu64
            "\ndevice_allocations %" PRIu64 "\npinned_host %" PRIu64 "\nhost_registrations %" PRIu64
            "\nstreams %" PRIu64 "\nevents %" PRIu64 "\nmodules %" PRIu64 "\nlive_objects %" PRIu64
            "\nprimary_ctx_refs %" PRIu64 "\nkernel_launches %" PRIu64 "\nbytes_copied %" PRIu64
            "\ncalls_total %" PRIu64 "\n",
            c.allocations, c.imports, c.reservations, c.mappings, c.memory_objects, c.fabric_names,
            c.device_allocations, c.pinned_host, c.host_registrations, c.streams, c.events,
            c.modules, egm_fake_cuda_live_objects(), c.primary_ctx_refs, c.kernel_launches,
            c.bytes_copied, c.calls_total);
    fprintf(f, "pointer_queries %zu\n", egm_fake_cuda_calls("cuPointerGetAttribute"));
    fprintf(f, "fds_opened_since_load %lu\n", fds_opened_since_load(fileno(f)));
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "fake libcuda.so.1: EGM_FAKE_CUDA_REPORT %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
}

__attribute__((constructor)) static void configure(void)
{
    int devices = env_int("EGM_FAKE_CUDA_DEVICES", 0, EGM_FAKE_CUDA_MAX_DEVICES, 2);
    int numa = env_int("EGM_FAKE_CUDA_NUMA_NODES", 1, EGM_FAKE_CUDA_MAX_NUMA_NODES, 1);
    const char *gran = getenv("EGM_FAKE_CUDA_GRANULARITY");
    const char *fabric = getenv("EGM_FAKE_CUDA_FABRIC");
    const char *fail = getenv("EGM_FAKE_CUDA_FAIL");
    uint64_t granularity = 0;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

    if (gran != NULL && (parse_u64(gran, 1, SIZE_MAX, &granularity) != 0 ||
                         (granularity & (granularity - 1)) != 0 || granularity % page != 0))
        die("EGM_FAKE_CUDA_GRANULARITY=\"%s\": expected bytes, a power of two and a multiple "
            "of the page size (%" PRIu64 ")",
            gran, page);
    if (fabric != NULL && strcmp(fabric, "0") != 0 && strcmp(fabric, "1") != 0)
        die("EGM_FAKE_CUDA_FABRIC=\"%s\": expected 0 (not permitted) or 1 (permitted)", fabric);
    if (fail != NULL)
        apply_failures(fail, 0); /* checked before the reset clears the name lookups' counts */

    egm_fake_cuda_reset(devices, numa);
    if (granularity != 0)
        egm_fake_cuda_set_granularity((size_t)granularity);
    if (fabric != NULL && strcmp(fabric, "0") == 0)
        egm_fake_cuda_set_fabric(1, 0);
    if (fail != NULL)
        apply_failures(fail, 1);
    load_pid = getpid();
    each_fd(remember_fd, NULL);
}

/* At exit (destructors run after the atexit handlers of the program). */
__attribute__((destructor)) static void report(void)
{
    write_report();
}

static void *lookup(const char *symbol)
{
    int i = symbol != NULL ? function_index(symbol) : -1;
    if (i < 0)
        return NULL;
    void *fn;
    /* The table is EGM_FAKE_CUDA_FUNCTIONS order, one function pointer each. */
    memcpy(&fn, (const char *)egm_fake_cuda_api() + (size_t)i * sizeof(fn), sizeof(fn));
    return fn;
}

/* Any version answers the fake's entry: the fake implements the signatures the
 * table declares, which are the versions driver.c asks for. */
egm_cu_result_t cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                    uint64_t flags, int *symbol_status)
{
    (void)cuda_version;
    (void)flags;
    if (pfn == NULL)
        return EGM_CU_ERROR_INVALID_VALUE;
    *pfn = lookup(symbol);
    if (symbol_status != NULL)
        *symbol_status = *pfn != NULL ? SYMBOL_FOUND : SYMBOL_NOT_FOUND;
    return *pfn != NULL ? EGM_CU_SUCCESS : EGM_CU_ERROR_NOT_FOUND;
}

egm_cu_result_t cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, uint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL);
}
