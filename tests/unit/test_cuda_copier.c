/* Copier against the fake driver: single copies through the copy engines,
 * batches through the kernel (the fake runs egm_copy_blocks as CPU loops, and
 * like a GPU refuses pageable memory, descriptors included) or through
 * cuMemcpyBatchAsync, the switch-over threshold, failures reported with the
 * call's name, the pressure bounds (chunks, groups of bounded bytes: what is
 * issued between two waits, recorded by a wrapper of the fake's table), and
 * no CUDA object or allocation left behind. Buffers are the fake's device
 * memory (cuMemAlloc) read and written through its host view. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "cuda/copier.h"
#include "cuda/driver.h"
#include "support/fake_cuda.h"
#include "support/testutil.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)

static const egm_cuda_api_t *cu;
static uint64_t live_at_start;

typedef struct {
    egm_cu_deviceptr_t src;
    egm_cu_deviceptr_t dst;
    size_t size;
} bufs_t;

static int setup(void **state)
{
    (void)state;
    egm_fake_cuda_reset(2, 1);
    live_at_start = egm__alloc_live_count();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_fake_cuda_clear_failures();
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static uint8_t *view(egm_cu_deviceptr_t p, size_t len)
{
    uint8_t *v = egm_fake_cuda_host_view(p, len);
    assert_non_null(v);
    return v;
}

/* Device `device`'s memory: src filled with a pattern, dst zeroed. */
static bufs_t bufs_alloc(int device, size_t size)
{
    bufs_t b = {.size = size};
    assert_int_equal(egm__cuda_use_device(device), EGM_OK);
    assert_int_equal(cu->cuMemAlloc(&b.src, size), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAlloc(&b.dst, size), EGM_CU_SUCCESS);
    uint8_t *s = view(b.src, size);
    uint32_t x = 2463534242u + (uint32_t)size;
    for (size_t i = 0; i < size; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s[i] = (uint8_t)x;
    }
    memset(view(b.dst, size), 0, size);
    return b;
}

static void bufs_free(int device, bufs_t *b)
{
    assert_int_equal(egm__cuda_use_device(device), EGM_OK);
    assert_int_equal(cu->cuMemFree(b->src), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemFree(b->dst), EGM_CU_SUCCESS);
}

/* n blocks of `block` bytes, gathered from scattered places of src (stride
 * 2 * block, plus `skew` bytes) into consecutive places of dst. */
static egm_copy_desc_t *gather(const bufs_t *b, size_t n, uint64_t block, uint64_t skew)
{
    egm_copy_desc_t *d = calloc(n, sizeof(*d));
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) {
        uint64_t from = (i * 2 * block + skew) % (b->size - block);
        d[i] = (egm_copy_desc_t){.dst = b->dst + i * block, .src = b->src + from, .len = block};
        assert_true(i * block + block <= b->size);
    }
    return d;
}

static void check_copied(const egm_copy_desc_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (d[i].len > 0)
            assert_memory_equal(view(d[i].dst, d[i].len), view(d[i].src, d[i].len), d[i].len);
}

static egm_copier_stats_t stats_of(const egm_copier_t *c)
{
    egm_copier_stats_t s;
    egm__copier_stats(c, &s);
    return s;
}

static egm_copier_t *copier_new(int device, int low_priority)
{
    egm_copier_t *c = NULL;
    assert_int_equal(egm__copier_create(device, low_priority, &c), EGM_OK);
    assert_non_null(c);
    return c;
}

/* The fake's table with the copy calls and the waits recorded (installed for
 * the whole file): the bytes issued between two cuEventSynchronize calls form
 * one group, so a test sees how a run was cut without timing anything. */
#define REC_GROUPS 4096
static egm_cuda_api_t rec_api;
static struct {
    uint64_t pending;                 /* bytes issued since the last wait */
    size_t groups;                    /* waits that ended a group */
    uint64_t group_bytes[REC_GROUPS]; /* bytes of each */
    uint64_t largest;                 /* largest engine copy or batch entry issued */
} rec;

/* Runs of several threads wait outside the copier's lock: rec has its own. */
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rec_cond = PTHREAD_COND_INITIALIZER;

/* A gate in the next wait (armed by a test): the waiting thread holds until
 * another thread has issued a copy, or until hold_ms have passed. */
static struct {
    int armed;
    int waiting; /* a thread holds in its wait */
    int issued_while_waiting;
    int hold_ms;
} gate;

static void rec_clear(void)
{
    pthread_mutex_lock(&rec_lock);
    memset(&rec, 0, sizeof(rec));
    memset(&gate, 0, sizeof(gate));
    pthread_mutex_unlock(&rec_lock);
}

static void rec_issue(uint64_t bytes)
{
    pthread_mutex_lock(&rec_lock);
    rec.pending += bytes;
    if (bytes > rec.largest)
        rec.largest = bytes;
    if (gate.waiting) {
        gate.issued_while_waiting++;
        pthread_cond_broadcast(&rec_cond);
    }
    pthread_mutex_unlock(&rec_lock);
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void gate_hold(void)
{
    struct timespec until;
    deadline_in(&until, gate.hold_ms);
    gate.armed = 0;
    gate.waiting = 1;
    pthread_cond_broadcast(&rec_cond);
    while (gate.issued_while_waiting == 0)
        if (pthread_cond_timedwait(&rec_cond, &rec_lock, &until) != 0)
            break;
    gate.waiting = 0;
}

/* Deferred streams (armed by a test): kernel launches, copies, event records
 * and stream waits are queued per stream instead of run at once, and run at
 * the next synchronize in an order the events allow. later_first picks, among
 * the streams whose next work may start, the one issued last: work runs as
 * far ahead of its issue order as the events let it, so a missing wait shows
 * as wrong bytes. */
typedef enum { DOP_KERNEL, DOP_COPY, DOP_RECORD, DOP_WAIT } dop_kind_t;
typedef struct {
    dop_kind_t kind;
    egm_cu_stream_t stream;
    int event;    /* RECORD, WAIT: index in dq.events */
    unsigned seq; /* RECORD: its number; WAIT: the record it waits for (0: none) */
    egm_cu_function_t func;
    unsigned grid, threads;
    const egm_copy_desc_t *descs;
    uint32_t count;
    egm_cu_deviceptr_t dst, src;
    size_t len;
    int done;
} dop_t;
#define DQ_OPS 8192
#define DQ_EVENTS 32
static struct {
    int on, later_first;
    dop_t ops[DQ_OPS];
    size_t n;
    struct {
        egm_cu_event_t ev;
        unsigned issued, completed; /* records issued, records run */
    } events[DQ_EVENTS];
    size_t n_events;
    size_t ran; /* ops run so far (all runs) */
} dq;

static int dq_event(egm_cu_event_t ev)
{
    for (size_t i = 0; i < dq.n_events; i++)
        if (dq.events[i].ev == ev)
            return (int)i;
    assert_true(dq.n_events < DQ_EVENTS);
    dq.events[dq.n_events].ev = ev;
    dq.events[dq.n_events].issued = dq.events[dq.n_events].completed = 0;
    return (int)dq.n_events++;
}

static void dq_push(dop_t op)
{
    assert_true(dq.n < DQ_OPS);
    dq.ops[dq.n++] = op;
}

static int dq_ready(const dop_t *op)
{
    return op->kind != DOP_WAIT || dq.events[op->event].completed >= op->seq;
}

/* Runs queued ops (each stream in its order) until `until`'s last record has
 * run (NULL: all of them); what that record does not wait for stays queued.
 * A deadlock fails the test. */
static void dq_run(egm_cu_event_t until)
{
    const egm_cuda_api_t *f = egm_fake_cuda_api();
    int target = until != NULL ? dq_event(until) : -1;
    unsigned target_seq = target >= 0 ? dq.events[target].issued : 0;
    for (;;) {
        if (target >= 0 && dq.events[target].completed >= target_seq)
            break;
        /* each stream's first op not done: the earliest op of its stream */
        long pick = -1;
        size_t left = 0;
        for (size_t i = 0; i < dq.n; i++) {
            if (dq.ops[i].done)
                continue;
            left++;
            int first_of_stream = 1;
            for (size_t j = 0; j < i && first_of_stream; j++)
                if (!dq.ops[j].done && dq.ops[j].stream == dq.ops[i].stream)
                    first_of_stream = 0;
            if (!first_of_stream || !dq_ready(&dq.ops[i]))
                continue;
            if (pick < 0 || dq.later_first)
                pick = (long)i;
        }
        if (left == 0)
            break;
        assert_true(pick >= 0); /* work left that nothing can start: a wait never met */
        dop_t *op = &dq.ops[pick];
        if (op->kind == DOP_KERNEL) {
            const egm_copy_desc_t *descs = op->descs;
            uint32_t count = op->count;
            void *params[] = {&descs, &count};
            assert_int_equal(f->cuLaunchKernel(op->func, op->grid, 1, 1, op->threads, 1, 1, 0,
                                               op->stream, params, NULL),
                             EGM_CU_SUCCESS);
        } else if (op->kind == DOP_COPY) {
            assert_int_equal(f->cuMemcpyAsync(op->dst, op->src, op->len, op->stream),
                             EGM_CU_SUCCESS);
        } else if (op->kind == DOP_RECORD) {
            assert_int_equal(f->cuEventRecord(dq.events[op->event].ev, op->stream), EGM_CU_SUCCESS);
            dq.events[op->event].completed = op->seq;
        }
        op->done = 1;
        dq.ran++;
    }
    size_t kept = 0;
    for (size_t i = 0; i < dq.n; i++)
        if (!dq.ops[i].done)
            dq.ops[kept++] = dq.ops[i];
    dq.n = kept;
}

static egm_cu_result_t rec_cuEventRecord(egm_cu_event_t event, egm_cu_stream_t stream)
{
    if (!dq.on)
        return egm_fake_cuda_api()->cuEventRecord(event, stream);
    int e = dq_event(event);
    dq_push(
        (dop_t){.kind = DOP_RECORD, .stream = stream, .event = e, .seq = ++dq.events[e].issued});
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t rec_cuStreamWaitEvent(egm_cu_stream_t stream, egm_cu_event_t event,
                                             unsigned flags)
{
    egm_cu_result_t rc = egm_fake_cuda_api()->cuStreamWaitEvent(stream, event, flags);
    if (!dq.on || rc != EGM_CU_SUCCESS)
        return rc;
    int e = dq_event(event);
    dq_push((dop_t){.kind = DOP_WAIT, .stream = stream, .event = e, .seq = dq.events[e].issued});
    return EGM_CU_SUCCESS;
}

static egm_cu_result_t rec_cuStreamSynchronize(egm_cu_stream_t stream)
{
    if (dq.on)
        dq_run(NULL);
    return egm_fake_cuda_api()->cuStreamSynchronize(stream);
}

static egm_cu_result_t rec_cuMemcpyAsync(egm_cu_deviceptr_t dst, egm_cu_deviceptr_t src,
                                         size_t size, egm_cu_stream_t stream)
{
    if (dq.on) {
        dq_push((dop_t){.kind = DOP_COPY, .stream = stream, .dst = dst, .src = src, .len = size});
        rec_issue(size);
        return EGM_CU_SUCCESS;
    }
    egm_cu_result_t rc = egm_fake_cuda_api()->cuMemcpyAsync(dst, src, size, stream);
    if (rc == EGM_CU_SUCCESS)
        rec_issue(size);
    return rc;
}

static egm_cu_result_t rec_cuMemcpyBatchAsync(egm_cu_deviceptr_t *dsts, egm_cu_deviceptr_t *srcs,
                                              size_t *sizes, size_t count,
                                              egm_cu_memcpy_attributes_t *attrs, size_t *attr_idxs,
                                              size_t num_attrs, egm_cu_stream_t stream)
{
    egm_cu_result_t rc = egm_fake_cuda_api()->cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs,
                                                                 attr_idxs, num_attrs, stream);
    if (rc == EGM_CU_SUCCESS)
        for (size_t i = 0; i < count; i++)
            rec_issue(sizes[i]);
    return rc;
}

/* The kernel's pieces are its own cut (at most 256 KiB): counted as bytes only. */
static egm_cu_result_t rec_cuLaunchKernel(egm_cu_function_t func, unsigned gx, unsigned gy,
                                          unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                          unsigned shared, egm_cu_stream_t stream, void **params,
                                          void **extra)
{
    if (dq.on) {
        dq_push((dop_t){.kind = DOP_KERNEL,
                        .stream = stream,
                        .func = func,
                        .grid = gx,
                        .threads = bx,
                        .descs = *(const egm_copy_desc_t **)params[0],
                        .count = *(const uint32_t *)params[1]});
        (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)extra;
        return EGM_CU_SUCCESS;
    }
    egm_cu_result_t rc = egm_fake_cuda_api()->cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared,
                                                             stream, params, extra);
    if (rc == EGM_CU_SUCCESS) {
        const egm_copy_desc_t *descs = *(const egm_copy_desc_t **)params[0];
        uint32_t count = *(const uint32_t *)params[1];
        uint64_t bytes = 0;
        for (uint32_t i = 0; i < count; i++)
            bytes += descs[i].len;
        pthread_mutex_lock(&rec_lock);
        rec.pending += bytes;
        pthread_mutex_unlock(&rec_lock);
    }
    return rc;
}

static egm_cu_result_t rec_cuEventSynchronize(egm_cu_event_t event)
{
    if (dq.on)
        dq_run(event);
    pthread_mutex_lock(&rec_lock);
    if (gate.armed)
        gate_hold();
    egm_cu_result_t rc = egm_fake_cuda_api()->cuEventSynchronize(event);
    if (rec.pending > 0) {
        assert_true(rec.groups < REC_GROUPS);
        rec.group_bytes[rec.groups++] = rec.pending;
        rec.pending = 0;
    }
    pthread_mutex_unlock(&rec_lock);
    return rc;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_single_copy_uses_engine(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 8 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_fake_cuda_clear_calls();

    egm_copy_desc_t one = {.dst = b.dst + 3, .src = b.src + 5, .len = 6 * MIB + 7};
    assert_int_equal(egm__copier_run(c, &one, 1), EGM_OK);
    check_copied(&one, 1);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 1);
    assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyBatchAsync"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuEventSynchronize"), 1);
    egm_copier_stats_t s = stats_of(c);
    assert_int_equal(s.copies, 1);
    assert_int_equal(s.bytes, one.len);
    assert_int_equal(s.engine_copies, 1);
    assert_int_equal(s.kernel_launches, 0);
    assert_int_equal(s.batch_api_calls, 0);

    /* Empty runs and empty copies move nothing and call nothing. */
    egm_copy_desc_t empty[3] = {{.dst = b.dst, .src = b.src, .len = 0}};
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__copier_run(c, empty, 3), EGM_OK);
    assert_int_equal(egm__copier_run(c, NULL, 0), EGM_OK);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuEventRecord"), 0);
    assert_int_equal(stats_of(c).copies, 4);
    assert_int_equal(stats_of(c).bytes, one.len);

    egm__copier_destroy(c);
    bufs_free(0, &b);
}

static void test_batch_through_kernel(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP(
            "built without nvcc: no copy kernel (test_batch_api_without_kernel covers batches)");
    enum { N = 512 };
    bufs_t b = bufs_alloc(1, 2 * N * 4 * KIB + 64 * KIB);
    egm_copier_t *c = copier_new(1, 0);
    egm_copy_desc_t *d = gather(&b, N, 4 * KIB, 0);
    egm_fake_cuda_clear_calls();
    uint64_t bytes_before = egm_fake_cuda_counters().bytes_copied;

    assert_int_equal(egm__copier_run(c, d, N), EGM_OK);
    check_copied(d, N);
    assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 1);
    /* One wait, the caller's: 512 pieces exactly fill the descriptor buffer,
     * which once cost a second wait under the lock (review). */
    assert_int_equal(egm_fake_cuda_calls("cuEventSynchronize"), 1);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyBatchAsync"), 0);
    /* Descriptors are not payload: exactly the blocks' bytes moved. */
    assert_int_equal(egm_fake_cuda_counters().bytes_copied - bytes_before, N * 4 * KIB);
    /* The pinned descriptor buffer is allocated once and kept. */
    assert_int_equal(egm_fake_cuda_calls("cuMemAllocHost"), 1);
    assert_int_equal(egm__copier_run(c, d, N), EGM_OK);
    assert_int_equal(egm_fake_cuda_calls("cuMemAllocHost"), 1);
    egm_copier_stats_t s = stats_of(c);
    assert_int_equal(s.copies, 2 * N);
    assert_int_equal(s.bytes, 2 * N * 4 * KIB);
    assert_int_equal(s.kernel_launches, 2);
    assert_int_equal(s.engine_copies, 0);
    assert_int_equal(s.batch_api_calls, 0);

    free(d);
    egm__copier_destroy(c);
    bufs_free(1, &b);
}

/* Runs whose pieces exactly fill the pinned descriptor buffer (its sizes are
 * powers of two from 256), and one with an empty copy last, are one launch and
 * one wait: none under the copier's lock. */
static void test_kernel_full_buffer_one_wait(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel");
    static const size_t counts[] = {256, 1024, 1000};
    bufs_t b = bufs_alloc(0, 2 * 1024 * 4 * KIB + 64 * KIB);
    egm_copier_t *c = copier_new(0, 0);
    for (size_t t = 0; t < sizeof(counts) / sizeof(counts[0]); t++) {
        size_t n = counts[t];
        egm_copy_desc_t *d = gather(&b, n, 4 * KIB, 0);
        if (n == 1000)
            d[n - 1].len = 0; /* an empty copy after the last piece */
        egm_fake_cuda_clear_calls();
        assert_int_equal(egm__copier_run(c, d, n), EGM_OK);
        check_copied(d, n);
        assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 1);
        assert_int_equal(egm_fake_cuda_calls("cuEventSynchronize"), 1);
        free(d);
    }
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* Odd sizes and offsets, blocks up to the limit (cut into pieces for the
 * kernel), empty ones in between: every byte lands, nothing else changes. */
static void test_kernel_mixed_sizes(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel");
    enum { N = 48 };
    static const uint64_t sizes[] = {
        1, 15, 16, 17, 4 * KIB - 1, 64 * KIB, 256 * KIB + 3, 1 * MIB, 4 * MIB, 0, 3 * MIB + 5, 100};
    bufs_t b = bufs_alloc(0, 96 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    /* blocks up to 4 MiB, cut into pieces: above the default limit */
    egm__copier_set_kernel_threshold(c, 32, 4 * MIB);
    egm_copy_desc_t d[N];
    uint64_t at = 0, total = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t len = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
        d[i] = (egm_copy_desc_t){
            .dst = b.dst + at + 1, .src = b.src + (at + 7 * i) % MIB + 9, .len = len};
        at += len + 32;
        total += len;
    }
    assert_true(at + 1 <= b.size);
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__copier_run(c, d, N), EGM_OK);
    check_copied(d, N);
    /* The gaps between destinations are untouched. */
    for (size_t i = 0; i < N; i++)
        assert_int_equal(view(d[i].dst + d[i].len, 1)[0], 0);
    assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 1);
    assert_int_equal(stats_of(c).bytes, total);

    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* More pieces than one pinned buffer holds: several launches, each waited
 * for before the buffer is refilled, and still every byte right. */
static void test_kernel_many_launches(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel");
    enum { N = 70000, BLOCK = 16 };
    bufs_t b = bufs_alloc(0, 2 * N * BLOCK + 64);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t *d = gather(&b, N, BLOCK, 16);
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__copier_run(c, d, N), EGM_OK);
    check_copied(d, N);
    assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 2);
    assert_int_equal(stats_of(c).kernel_launches, 2);
    free(d);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

static void test_threshold_switch(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel");
    bufs_t b = bufs_alloc(0, 16 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t *d = gather(&b, 64, 64 * KIB, 0);

    /* Default: 31 blocks go to one cuMemcpyBatchAsync, 32 to the kernel. */
    assert_int_equal(egm__copier_run(c, d, 31), EGM_OK);
    egm_copier_stats_t s = stats_of(c);
    assert_int_equal(s.batch_api_calls, 1);
    assert_int_equal(s.engine_copies, 0);
    assert_int_equal(s.kernel_launches, 0);
    check_copied(d, 31);
    assert_int_equal(egm__copier_run(c, d, 32), EGM_OK);
    s = stats_of(c);
    assert_int_equal(s.batch_api_calls, 1);
    assert_int_equal(s.kernel_launches, 1);
    check_copied(d, 32);

    /* One block above 512 KiB sends the whole batch to the batch call. */
    egm_copy_desc_t keep = d[5];
    d[5] = (egm_copy_desc_t){.dst = b.dst + 8 * MIB, .src = b.src, .len = 512 * KIB + 1};
    assert_int_equal(egm__copier_run(c, d + 5, 40), EGM_OK);
    s = stats_of(c);
    assert_int_equal(s.batch_api_calls, 2);
    assert_int_equal(s.kernel_launches, 1);
    check_copied(d + 5, 40);
    /* 512 KiB itself is still the kernel's. */
    d[5].len = 512 * KIB;
    assert_int_equal(egm__copier_run(c, d + 5, 40), EGM_OK);
    assert_int_equal(stats_of(c).kernel_launches, 2);
    check_copied(d + 5, 40);
    d[5] = keep;

    /* Tuned: 4 blocks of <= 64 KiB go to the kernel, 3 or a 64 KiB + 1 do
     * not; a single block always takes an engine. */
    egm__copier_set_kernel_threshold(c, 4, 64 * KIB);
    assert_int_equal(egm__copier_run(c, d, 4), EGM_OK);
    assert_int_equal(stats_of(c).kernel_launches, 3);
    assert_int_equal(egm__copier_run(c, d, 3), EGM_OK);
    assert_int_equal(stats_of(c).batch_api_calls, 3);
    d[0] = (egm_copy_desc_t){.dst = b.dst + 12 * MIB, .src = b.src + 1, .len = 64 * KIB + 1};
    assert_int_equal(egm__copier_run(c, d, 4), EGM_OK);
    assert_int_equal(stats_of(c).kernel_launches, 3);
    assert_int_equal(stats_of(c).batch_api_calls, 4);
    check_copied(d, 4);
    assert_int_equal(egm__copier_run(c, d, 1), EGM_OK);
    assert_int_equal(stats_of(c).engine_copies, 1);

    free(d);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* No kernel on this device (a build without nvcc, or a GPU the fatbin has no
 * code for): batches go through one cuMemcpyBatchAsync call. */
static void test_batch_api_without_kernel(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 8 * MIB);
    if (egm__copier_has_kernels())
        egm_fake_cuda_fail("cuModuleLoadData", 1, 209 /* NO_BINARY_FOR_GPU */);
    egm_copier_t *c = copier_new(0, 0);
    egm_fake_cuda_clear_failures();
    egm_copy_desc_t *d = gather(&b, 40, 64 * KIB, 3);
    d[7].len = 0; /* left out of the call */
    egm_fake_cuda_clear_calls();

    assert_int_equal(egm__copier_run(c, d, 40), EGM_OK);
    check_copied(d, 40);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyBatchAsync"), 1);
    assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 0);
    /* Even two blocks are one call; a single one goes to an engine. */
    assert_int_equal(egm__copier_run(c, d, 2), EGM_OK);
    assert_int_equal(egm__copier_run(c, d, 1), EGM_OK);
    egm_copier_stats_t s = stats_of(c);
    assert_int_equal(s.batch_api_calls, 2);
    assert_int_equal(s.engine_copies, 1);
    assert_int_equal(s.kernel_launches, 0);
    assert_int_equal(s.copies, 43);
    assert_int_equal(s.bytes, 39 * 64 * KIB + 2 * 64 * KIB + 64 * KIB);

    /* Its failure is reported by name; the next run works again. */
    egm_fake_cuda_fail("cuMemcpyBatchAsync", 1, EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(egm__copier_run(c, d, 40), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "cuMemcpyBatchAsync: CUDA_ERROR_INVALID_VALUE"));
    assert_int_equal(stats_of(c).batch_api_calls, 2);
    assert_int_equal(egm__copier_run(c, d, 40), EGM_OK);

    free(d);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

static void test_errors_propagate(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 4 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t *d = gather(&b, 64, 16 * KIB, 0);

    /* Engine copy refused while issuing: the call's error, nothing counted.
     * (More than one copy would take the batch call or the kernel.) */
    size_t n_engine = 1;
    unsigned nth = 1;
    egm_fake_cuda_fail("cuMemcpyAsync", nth, EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS);
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__copier_run(c, d, n_engine), EGM_ERR_TRANSFER);
    assert_non_null(strstr(egm_last_error(), "cuMemcpyAsync: CUDA_ERROR_ILLEGAL_ADDRESS"));
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), nth);     /* stopped at the failure */
    assert_int_equal(egm_fake_cuda_calls("cuStreamSynchronize"), 1); /* drained */
    assert_int_equal(stats_of(c).copies, 0);

    /* Failure found when waiting (an asynchronous error). */
    egm_fake_cuda_fail("cuEventSynchronize", 1, 719 /* LAUNCH_FAILED */);
    assert_int_equal(egm__copier_run(c, d, 1), EGM_ERR_TRANSFER);
    assert_non_null(strstr(egm_last_error(), "cuEventSynchronize: CUDA_ERROR_LAUNCH_FAILED"));
    egm_fake_cuda_fail("cuEventRecord", 1, EGM_CU_ERROR_INVALID_HANDLE);
    assert_int_equal(egm__copier_run(c, d, 1), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "cuEventRecord"));

    if (egm__copier_has_kernels()) {
        egm_fake_cuda_fail("cuLaunchKernel", 1, EGM_CU_ERROR_INVALID_VALUE);
        assert_int_equal(egm__copier_run(c, d, 64), EGM_ERR_INVALID_ARG);
        assert_non_null(
            strstr(egm_last_error(), "cuLaunchKernel(egm_copy_blocks): CUDA_ERROR_INVALID_VALUE"));
        /* No pinned memory for the descriptors. */
        egm__copier_destroy(c);
        c = copier_new(0, 0);
        egm_fake_cuda_fail("cuMemAllocHost", 1, EGM_CU_ERROR_OUT_OF_MEMORY);
        assert_int_equal(egm__copier_run(c, d, 64), EGM_ERR_NO_MEMORY);
        assert_non_null(strstr(egm_last_error(), "cuMemAllocHost"));
        /* The kernel, like a GPU, cannot reach pageable memory: the fault
         * surfaces as a failed transfer. */
        uint8_t *heap = malloc(64 * 16 * KIB);
        assert_non_null(heap);
        egm_copy_desc_t bad[64];
        memcpy(bad, d, sizeof(bad));
        bad[10].src = (uint64_t)(uintptr_t)heap;
        assert_int_equal(egm__copier_run(c, bad, 64), EGM_ERR_TRANSFER);
        assert_non_null(strstr(egm_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"));
        free(heap);
    }
    assert_int_equal(stats_of(c).copies, 0);
    /* After all that, copies work. */
    memset(view(b.dst, b.size), 0, b.size);
    assert_int_equal(egm__copier_run(c, d, 64), EGM_OK);
    check_copied(d, 64);

    free(d);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 64 * KIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t d[2] = {{.dst = b.dst, .src = b.src, .len = 16},
                            {.dst = b.dst + 16, .src = b.src, .len = 16}};
    egm_fake_cuda_clear_calls();

    assert_int_equal(egm__copier_run(NULL, d, 1), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__copier_run(c, NULL, 1), EGM_ERR_INVALID_ARG);
    d[1].src = 0;
    assert_int_equal(egm__copier_run(c, d, 2), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "copies[1].src"));
    d[1].src = b.src;
    d[1].dst = 0;
    assert_int_equal(egm__copier_run(c, d, 2), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "copies[1].dst"));
    d[1].dst = UINT64_MAX - 8;
    assert_int_equal(egm__copier_run(c, d, 2), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "copies[1].len"));
    /* Nothing reached the driver, nothing was counted. */
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyBatchAsync"), 0);
    assert_int_equal(stats_of(c).copies, 0);

    egm_copier_t *none = (egm_copier_t *)&none;
    assert_int_equal(egm__copier_create(2, 0, &none), EGM_ERR_INVALID_ARG);
    assert_null(none);
    assert_int_equal(egm__copier_create(-1, 0, &none), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__copier_create(0, 0, NULL), EGM_ERR_INVALID_ARG);
    egm__copier_destroy(NULL);
    egm_copier_stats_t s;
    egm__copier_stats(NULL, &s);
    assert_int_equal(s.copies, 0);

    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* Creating and using a copier leaves the caller's current context alone;
 * the low-priority stream asks the driver for its priority range. */
static void test_context_and_priority(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 64 * KIB);
    egm_cu_context_t c1 = NULL, now = NULL;
    assert_int_equal(egm__cuda_use_device(1), EGM_OK);
    assert_int_equal(cu->cuCtxGetCurrent(&c1), EGM_CU_SUCCESS);
    egm_fake_cuda_clear_calls();

    egm_copier_t *c = copier_new(0, 1);
    assert_int_equal(egm_fake_cuda_calls("cuCtxGetStreamPriorityRange"), 1);
    assert_int_equal(cu->cuCtxGetCurrent(&now), EGM_CU_SUCCESS);
    assert_ptr_equal(now, c1);
    egm_copy_desc_t d = {.dst = b.dst, .src = b.src, .len = 64 * KIB};
    assert_int_equal(egm__copier_run(c, &d, 1), EGM_OK);
    check_copied(&d, 1);
    assert_int_equal(cu->cuCtxGetCurrent(&now), EGM_CU_SUCCESS);
    assert_ptr_equal(now, c1);
    egm__copier_destroy(c);
    assert_int_equal(cu->cuCtxGetCurrent(&now), EGM_CU_SUCCESS);
    assert_ptr_equal(now, c1);

    egm_fake_cuda_clear_calls();
    c = copier_new(0, 0);
    assert_int_equal(egm_fake_cuda_calls("cuCtxGetStreamPriorityRange"), 0);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* Every driver call that copier_create makes, failed in turn: an error that
 * names the call (or, for the kernel module, a copier without the kernel),
 * and no CUDA object or allocation left behind. */
static void test_create_fault_sweep(void **state)
{
    (void)state;
    const char *names[EGM_FAKE_CUDA_N_FUNCTIONS];
    assert_int_equal(egm__cuda_use_device(0), EGM_OK); /* retained before the sweep */
    egm_fake_cuda_clear_calls();
    egm_copier_t *c = copier_new(0, 1);
    egm__copier_destroy(c);
    size_t n = egm_fake_cuda_called(names, EGM_FAKE_CUDA_N_FUNCTIONS);
    size_t calls[EGM_FAKE_CUDA_N_FUNCTIONS];
    for (size_t i = 0; i < n; i++)
        calls[i] = egm_fake_cuda_calls(names[i]);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "cuGetErrorName") == 0 || strcmp(names[i], "cuGetErrorString") == 0)
            continue;
        for (size_t nth = 1; nth <= calls[i]; nth++) {
            egm_fake_cuda_clear_failures();
            egm_fake_cuda_fail(names[i], (unsigned)nth, EGM_CU_ERROR_UNKNOWN);
            c = NULL;
            egm_status_t st = egm__copier_create(0, 1, &c);
            egm_fake_cuda_clear_failures();
            if (st == EGM_OK) {
                egm__copier_destroy(c);
            } else {
                failed++;
                assert_null(c);
                assert_non_null(strstr(egm_last_error(), names[i]));
            }
            assert_int_equal(egm_fake_cuda_live_objects(), 0);
            assert_int_equal(egm__alloc_live_count(), live_at_start);
        }
    }
    assert_true(failed >= 3); /* at least the stream, the event and the priority range */

    /* A copier whose kernel module failed to load still copies batches. */
    if (egm__copier_has_kernels()) {
        egm_fake_cuda_fail("cuModuleGetFunction", 1, EGM_CU_ERROR_NOT_FOUND);
        c = copier_new(0, 0);
        assert_int_equal(egm_fake_cuda_counters().modules, 0); /* unloaded again */
        bufs_t b = bufs_alloc(0, 4 * MIB);
        egm_copy_desc_t *d = gather(&b, 64, 16 * KIB, 0);
        assert_int_equal(egm__copier_run(c, d, 64), EGM_OK);
        check_copied(d, 64);
        assert_int_equal(stats_of(c).kernel_launches, 0);
        assert_int_equal(stats_of(c).batch_api_calls, 1);
        free(d);
        egm__copier_destroy(c);
        bufs_free(0, &b);
    }
}

typedef struct {
    egm_copier_t *copier;
    egm_copy_desc_t *descs;
    size_t n;
    int failures;
} worker_t;

static void *worker(void *p)
{
    worker_t *w = p;
    for (int round = 0; round < 20; round++)
        if (egm__copier_run(w->copier, w->descs, w->n) != EGM_OK)
            w->failures++;
    return NULL;
}

/* Runs from several threads on one copier are serialised, each complete. */
static void test_threads_share_a_copier(void **state)
{
    (void)state;
    enum { THREADS = 4, N = 40, BLOCK = 8 * KIB };
    bufs_t b = bufs_alloc(0, THREADS * 2 * N * BLOCK + 64 * KIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t *all = gather(&b, THREADS * N, BLOCK, 0);
    pthread_t tid[THREADS];
    worker_t w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        /* Half the threads run kernel-sized batches, half engine-sized ones. */
        w[t] = (worker_t){.copier = c, .descs = all + t * N, .n = t % 2 ? N : 4};
        assert_int_equal(pthread_create(&tid[t], NULL, worker, &w[t]), 0);
    }
    uint64_t expect = 0;
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(pthread_join(tid[t], NULL), 0);
        assert_int_equal(w[t].failures, 0);
        check_copied(w[t].descs, w[t].n);
        expect += 20 * w[t].n;
    }
    assert_int_equal(stats_of(c).copies, expect);
    free(all);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

typedef struct {
    egm_copier_t *copier;
    egm_copy_desc_t desc;
    egm_status_t status;
} one_run_t;

static void *one_run(void *p)
{
    one_run_t *r = p;
    r->status = egm__copier_run(r->copier, &r->desc, 1);
    return NULL;
}

/* Thread A's run holds in its completion wait (the gate); thread B then
 * starts a run. Returns how many copies B issued while A was still waiting. */
static int issued_while_one_waits(egm_copier_t *c, const bufs_t *b, int hold_ms)
{
    one_run_t ra = {.copier = c, .desc = {.dst = b->dst, .src = b->src, .len = 1 * MIB}};
    one_run_t rb = {.copier = c,
                    .desc = {.dst = b->dst + 1 * MIB, .src = b->src + 1 * MIB, .len = 1 * MIB}};
    pthread_t ta, tb;
    rec_clear();
    pthread_mutex_lock(&rec_lock);
    gate.armed = 1;
    gate.hold_ms = hold_ms;
    pthread_mutex_unlock(&rec_lock);
    assert_int_equal(pthread_create(&ta, NULL, one_run, &ra), 0);
    pthread_mutex_lock(&rec_lock);
    while (!gate.waiting && gate.armed)
        pthread_cond_wait(&rec_cond, &rec_lock);
    pthread_mutex_unlock(&rec_lock);
    assert_int_equal(pthread_create(&tb, NULL, one_run, &rb), 0);
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    assert_int_equal(ra.status, EGM_OK);
    assert_int_equal(rb.status, EGM_OK);
    check_copied(&ra.desc, 1);
    check_copied(&rb.desc, 1);
    pthread_mutex_lock(&rec_lock);
    int issued = gate.issued_while_waiting;
    pthread_mutex_unlock(&rec_lock);
    return issued;
}

/* Without pressure bounds a run is waited for outside the copier's lock: a
 * second thread's run is issued (queued on the stream behind the first)
 * while the first thread still waits. Were the lock held through the wait,
 * B could not issue and A's gate would give up after 30 s: the test fails. */
static void test_runs_queue_while_one_waits(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 4 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    assert_int_equal(issued_while_one_waits(c, &b, 30000), 1);
    assert_int_equal(stats_of(c).copies, 2);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* With nvlink_max_inflight_bytes a run is waited for before the next is
 * issued: B issues nothing while A holds in its wait (300 ms). */
static void test_bounded_runs_do_not_overlap(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 4 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm__copier_set_pressure(c, 8 * MIB, 0);
    assert_int_equal(issued_while_one_waits(c, &b, 300), 0);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* ---- pressure bounds (nvlink_chunk_size, nvlink_max_inflight_bytes) ------- */

static void assert_groups(const uint64_t *want, size_t n)
{
    assert_int_equal(rec.groups, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rec.group_bytes[i], want[i]);
}

/* One run under a pressure setting and what it must show: the bytes of each
 * group the recorder saw, and how often `call` was made (when named). */
typedef struct {
    uint64_t inflight, chunk; /* egm__copier_set_pressure's */
    const uint64_t *groups;
    size_t n_groups;
    const char *call;
    int calls;
} bounded_run_t;

/* Runs d[n] from a zeroed dst under want's pressure and checks every byte,
 * the groups and the call count; the copier's stats are left to the caller. */
static void check_bounded_run(egm_copier_t *c, const bufs_t *b, const egm_copy_desc_t *d, size_t n,
                              const bounded_run_t *want)
{
    egm__copier_set_pressure(c, want->inflight, want->chunk);
    memset(view(b->dst, b->size), 0, b->size);
    egm_fake_cuda_clear_calls();
    rec_clear();
    assert_int_equal(egm__copier_run(c, d, n), EGM_OK);
    check_copied(d, n);
    assert_groups(want->groups, want->n_groups);
    if (want->call != NULL)
        assert_int_equal(egm_fake_cuda_calls(want->call), want->calls);
}

/* The batch the bound tests cut: N blocks of 64 KiB gathered from scattered
 * places, and the call a whole batch goes through (the kernel with the
 * kernels built in, else the batch call). */
enum { BATCH_N = 40 };
/* The batch cut by a 256 KiB bound: ten groups of four blocks. */
static const uint64_t ten[] = {256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB,
                               256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB};
typedef struct {
    bufs_t b;
    egm_copier_t *c;
    egm_copy_desc_t *d;
    const char *path;
} bound_batch_t;

static void bound_batch_init(bound_batch_t *t)
{
    t->b = bufs_alloc(0, 2 * BATCH_N * 64 * KIB + 64 * KIB);
    t->c = copier_new(0, 0);
    t->d = gather(&t->b, BATCH_N, 64 * KIB, 0);
    t->path = egm__copier_has_kernels() ? "cuLaunchKernel" : "cuMemcpyBatchAsync";
}

static void bound_batch_cleanup(bound_batch_t *t)
{
    free(t->d);
    egm__copier_destroy(t->c);
    bufs_free(0, &t->b);
}

/* A chunk size alone: a long copy becomes one engine call per chunk, all
 * issued before the one wait. */
static void test_chunk_cuts_a_single_copy(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 8 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t one = {.dst = b.dst + 3, .src = b.src + 5, .len = 6 * MIB + 7};
    uint64_t whole[] = {6 * MIB + 7};
    /* 6 x 1 MiB + 7 bytes */
    check_bounded_run(c, &b, &one, 1, &(bounded_run_t){0, 1 * MIB, whole, 1, "cuMemcpyAsync", 7});
    assert_int_equal(egm_fake_cuda_calls("cuEventSynchronize"), 1);
    assert_int_equal(rec.largest, 1 * MIB);
    egm_copier_stats_t s = stats_of(c);
    assert_int_equal(s.copies, 1);
    assert_int_equal(s.bytes, one.len);
    assert_int_equal(s.engine_copies, 7);
    assert_int_equal(s.groups, 1);
    assert_int_equal(s.chunks, 7);
    assert_int_equal(s.max_group_bytes, one.len);

    /* A copy no longer than the chunk goes whole; 0 turns chunking off. */
    one.len = 1 * MIB;
    uint64_t one_mib[] = {1 * MIB};
    check_bounded_run(c, &b, &one, 1, &(bounded_run_t){0, 1 * MIB, one_mib, 1, "cuMemcpyAsync", 1});
    one.len = 6 * MIB;
    uint64_t six_mib[] = {6 * MIB};
    check_bounded_run(c, &b, &one, 1, &(bounded_run_t){0, 0, six_mib, 1, "cuMemcpyAsync", 1});
    assert_int_equal(stats_of(c).chunks, 7);
    assert_int_equal(stats_of(c).groups, 3);

    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* The in-flight bound on a batch: groups of whole blocks of at most the bound,
 * each waited for before the next is issued, on whichever path the whole
 * batch takes. */
static void test_bound_splits_a_batch(void **state)
{
    (void)state;
    bound_batch_t t;
    bound_batch_init(&t);

    check_bounded_run(t.c, &t.b, t.d, BATCH_N, &(bounded_run_t){256 * KIB, 0, ten, 10, t.path, 10});
    assert_int_equal(egm_fake_cuda_calls("cuEventSynchronize"), 10);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 0);
    egm_copier_stats_t s = stats_of(t.c);
    assert_int_equal(s.groups, 10);
    assert_int_equal(s.chunks, 0); /* no block was cut */
    assert_int_equal(s.copies, BATCH_N);
    assert_int_equal(s.bytes, BATCH_N * 64 * KIB);
    assert_int_equal(s.max_group_bytes, 256 * KIB);
    if (egm__copier_has_kernels())
        assert_int_equal(s.kernel_launches, 10); /* 4 blocks each: still the kernel's */
    else
        assert_int_equal(s.batch_api_calls, 10);

    /* 200 KiB: blocks are not cut to fill a group, so 3 per group (192 KiB),
     * 13 of them and one of the last block. A batch within the bound goes as
     * one group; so does any batch at 0. */
    uint64_t uneven[14];
    for (size_t i = 0; i < 13; i++)
        uneven[i] = 192 * KIB;
    uneven[13] = 64 * KIB;
    uint64_t all[] = {BATCH_N * 64 * KIB};
    const bounded_run_t runs[] = {
        {200 * KIB, 0, uneven, 14, NULL, 0},
        {BATCH_N * 64 * KIB, 0, all, 1, NULL, 0},
        {0, 0, all, 1, NULL, 0},
    };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
        check_bounded_run(t.c, &t.b, t.d, BATCH_N, &runs[i]);
    assert_int_equal(stats_of(t.c).chunks, 0);

    bound_batch_cleanup(&t);
}

/* The bound also cuts copies longer than itself, and with a smaller chunk
 * size a group holds several chunks; nothing beyond the bound is in flight. */
static void test_bound_with_chunks(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 4 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t one = {.dst = b.dst, .src = b.src + 1, .len = 1 * MIB + 100};

    uint64_t five[] = {256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB, 100};
    check_bounded_run(c, &b, &one, 1, &(bounded_run_t){256 * KIB, 0, five, 5, "cuMemcpyAsync", 5});
    assert_int_equal(stats_of(c).chunks, 5);

    /* 64 KiB chunks, 256 KiB bound: 1 MiB = 16 engine calls in 4 groups. */
    one.len = 1 * MIB;
    uint64_t four[] = {256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB};
    check_bounded_run(c, &b, &one, 1,
                      &(bounded_run_t){256 * KIB, 64 * KIB, four, 4, "cuMemcpyAsync", 16});
    assert_int_equal(rec.largest, 64 * KIB);
    /* A chunk larger than the bound is cut to the bound. */
    check_bounded_run(c, &b, &one, 1,
                      &(bounded_run_t){256 * KIB, 1 * MIB, four, 4, "cuMemcpyAsync", 4});
    assert_int_equal(stats_of(c).max_group_bytes, 256 * KIB);

    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* The path is the batch's as given: a single long copy cut into many small
 * chunks stays on the copy engines, never the kernel. */
static void test_chunks_keep_the_path(void **state)
{
    (void)state;
    bufs_t b = bufs_alloc(0, 8 * MIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copy_desc_t one = {.dst = b.dst, .src = b.src, .len = 4 * MIB};
    uint64_t whole[] = {4 * MIB};
    check_bounded_run(c, &b, &one, 1,
                      &(bounded_run_t){0, 16 * KIB, whole, 1, "cuMemcpyAsync", 256});
    assert_int_equal(egm_fake_cuda_calls("cuLaunchKernel"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyBatchAsync"), 0);
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* A group that fails stops the run: the groups after it are never issued,
 * the error names the call, nothing is counted as copied. */
static void test_bound_failure_stops(void **state)
{
    (void)state;
    bound_batch_t t;
    bound_batch_init(&t);
    egm__copier_set_pressure(t.c, 256 * KIB, 0);
    egm_fake_cuda_clear_calls();
    egm_fake_cuda_fail(t.path, 3, EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(egm__copier_run(t.c, t.d, BATCH_N), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), t.path));
    assert_int_equal(egm_fake_cuda_calls(t.path), 3);
    egm_copier_stats_t s = stats_of(t.c);
    assert_int_equal(s.groups, 2);
    assert_int_equal(s.copies, 0);
    /* The next run goes through whole. */
    egm_fake_cuda_clear_failures();
    check_bounded_run(t.c, &t.b, t.d, BATCH_N, &(bounded_run_t){256 * KIB, 0, ten, 10, t.path, 10});
    assert_int_equal(stats_of(t.c).groups, 12);
    bound_batch_cleanup(&t);
}

/* n blocks of `block` bytes from consecutive places of src scattered into
 * places of dst (stride 2 * block): a get's shape (the far side contiguous). */
static egm_copy_desc_t *scatter(const bufs_t *b, size_t n, uint64_t block)
{
    egm_copy_desc_t *d = gather(b, n, block, 0);
    for (size_t i = 0; i < n; i++) {
        uint64_t far = d[i].dst - b->dst, near = d[i].src - b->src;
        d[i].src = b->src + far;
        d[i].dst = b->dst + near;
    }
    return d;
}

/* vLLM's shape (1024 pieces of 32 KiB, 32 MiB a run) through the bounce
 * buffer both ways, on deferred streams run in issue order and as far ahead
 * of it as the events allow: every byte lands, each run is one bounced run of
 * 4 chunks (kernel launches) whose far side goes as one engine copy a chunk. */
static void test_bounced_runs(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel (bouncing needs it)");
    enum { N = 1024 };
    bufs_t b = bufs_alloc(0, 2 * N * 32 * KIB + 64 * KIB);
    egm_copier_t *c = copier_new(0, 0);
    egm__copier_set_bounce(c, 16 * MIB);
    for (int later_first = 0; later_first < 2; later_first++) {
        for (int to_host = 1; to_host >= 0; to_host--) {
            egm_copy_desc_t *d = to_host ? gather(&b, N, 32 * KIB, 0) : scatter(&b, N, 32 * KIB);
            memset(view(b.dst, b.size), 0, b.size);
            egm_copier_stats_t before = stats_of(c);
            egm_fake_cuda_clear_calls();
            dq.on = 1;
            dq.later_first = later_first;
            assert_int_equal(
                egm__copier_run_sides(c, d, N,
                                      to_host ? EGM_COPY_DEVICE_TO_HOST : EGM_COPY_HOST_TO_DEVICE),
                EGM_OK);
            dq.on = 0;
            /* the run's wait covered all of its work */
            size_t left = dq.n;
            dq_run(NULL);
            assert_int_equal(left, 0);
            check_copied(d, N);
            egm_copier_stats_t after = stats_of(c);
            assert_int_equal(after.bounced_runs - before.bounced_runs, 1);
            assert_int_equal(after.kernel_launches - before.kernel_launches, 4);
            assert_int_equal(after.engine_copies - before.engine_copies, 4);
            assert_int_equal(after.bytes - before.bytes, N * 32 * KIB);
            assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 4);
            free(d);
        }
    }
    egm__copier_destroy(c);
    bufs_free(0, &b);
}

/* What is not bounced: sides unknown, no buffer, too few bytes, a far side
 * in short spans, pressure bounds. Each still copies every byte. */
static void test_bounce_only_where_it_pays(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel");
    enum { N = 1024 };
    bufs_t b = bufs_alloc(0, 2 * N * 32 * KIB + 64 * KIB);
    egm_copier_t *c = copier_new(0, 0);
    egm_copier_t *off = copier_new(0, 0);
    egm__copier_set_bounce(c, 16 * MIB);
    egm_copy_desc_t *d = gather(&b, N, 32 * KIB, 0);

    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_SIDES_ANY), EGM_OK);
    assert_int_equal(egm__copier_run(c, d, N), EGM_OK);
    assert_int_equal(egm__copier_run_sides(off, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    /* 511 pieces: under 16 MiB */
    assert_int_equal(egm__copier_run_sides(c, d, 511, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    /* the far side in spans of 32 KiB: every other piece */
    for (size_t i = 0; i < N; i++)
        d[i].dst = b.dst + 2 * i * 32 * KIB % (b.size - 32 * KIB);
    memset(view(b.dst, b.size), 0, b.size);
    assert_int_equal(egm__copier_run_sides(c, d, N / 2, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    check_copied(d, N / 2);
    assert_int_equal(stats_of(c).bounced_runs, 0);
    assert_int_equal(stats_of(off).bounced_runs, 0);
    free(d);

    /* Under a pressure bound runs are never bounced. */
    d = gather(&b, N, 32 * KIB, 0);
    egm__copier_set_pressure(c, 8 * MIB, 0);
    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    check_copied(d, N);
    assert_int_equal(stats_of(c).bounced_runs, 0);
    egm__copier_set_pressure(c, 0, 0);
    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    assert_int_equal(stats_of(c).bounced_runs, 1);
    free(d);

    /* Kernel blocks raised past a half (8 MiB here): such a run is not
     * bounced, and still copies. */
    egm__copier_set_kernel_threshold(c, 2, 16 * MIB);
    egm_copy_desc_t big[3];
    for (size_t i = 0; i < 3; i++)
        big[i] = (egm_copy_desc_t){
            .dst = b.dst + i * 8 * MIB, .src = b.src + (2 - i) * 8 * MIB, .len = 8 * MIB - 8};
    memset(view(b.dst, b.size), 0, b.size);
    assert_int_equal(egm__copier_run_sides(c, big, 3, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    check_copied(big, 3);
    assert_int_equal(stats_of(c).bounced_runs, 1);
    egm__copier_destroy(c);
    egm__copier_destroy(off);
    bufs_free(0, &b);
}

/* A bounce buffer the driver cannot allocate: a warning, bouncing off for
 * that copier, the run through the kernel, nothing left behind. A failure
 * during a bounced run is the run's error. */
static void test_bounce_failures(void **state)
{
    (void)state;
    if (!egm__copier_has_kernels())
        EGM_SKIP("built without nvcc: no copy kernel");
    enum { N = 1024 };
    bufs_t b = bufs_alloc(0, 2 * N * 32 * KIB + 64 * KIB);
    egm_copy_desc_t *d = gather(&b, N, 32 * KIB, 0);
    egm_copier_t *c = copier_new(0, 0);
    egm__copier_set_bounce(c, 16 * MIB);
    egm_fake_cuda_fail("cuMemAlloc", 1, EGM_CU_ERROR_OUT_OF_MEMORY);
    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    egm_fake_cuda_clear_failures();
    check_copied(d, N);
    assert_int_equal(stats_of(c).bounced_runs, 0);
    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    assert_int_equal(stats_of(c).bounced_runs, 0); /* off for good */
    egm__copier_destroy(c);

    c = copier_new(0, 0);
    egm__copier_set_bounce(c, 16 * MIB);
    egm_fake_cuda_fail("cuMemcpyAsync", 2, EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_ERR_TRANSFER);
    assert_non_null(strstr(egm_last_error(), "cuMemcpyAsync: CUDA_ERROR_ILLEGAL_ADDRESS"));
    egm_fake_cuda_clear_failures();
    memset(view(b.dst, b.size), 0, b.size);
    assert_int_equal(egm__copier_run_sides(c, d, N, EGM_COPY_DEVICE_TO_HOST), EGM_OK);
    check_copied(d, N);
    assert_int_equal(stats_of(c).bounced_runs, 1);
    egm__copier_destroy(c);
    free(d);
    bufs_free(0, &b);
}

static int group_setup(void **state)
{
    (void)state;
    rec_api = *egm_fake_cuda_api();
    rec_api.cuMemcpyAsync = rec_cuMemcpyAsync;
    rec_api.cuMemcpyBatchAsync = rec_cuMemcpyBatchAsync;
    rec_api.cuLaunchKernel = rec_cuLaunchKernel;
    rec_api.cuEventSynchronize = rec_cuEventSynchronize;
    rec_api.cuEventRecord = rec_cuEventRecord;
    rec_api.cuStreamWaitEvent = rec_cuStreamWaitEvent;
    rec_api.cuStreamSynchronize = rec_cuStreamSynchronize;
    cu = &rec_api;
    egm__cuda_set_api(cu);
    const egm_cuda_api_t *api;
    return egm__cuda_load(&api) == EGM_OK && api == cu ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_single_copy_uses_engine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_through_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kernel_mixed_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kernel_full_buffer_one_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kernel_many_launches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threshold_switch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_api_without_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_propagate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_and_priority, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_fault_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_a_copier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runs_queue_while_one_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounded_runs_do_not_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_cuts_a_single_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bound_splits_a_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bound_with_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunks_keep_the_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bound_failure_stops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounced_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounce_only_where_it_pays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounce_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
