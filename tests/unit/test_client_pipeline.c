/* Unit: the chunk pipeline (src/client/pipeline.[ch]): the chunk layout covers
 * every key of a batch exactly once, in order, with the smaller first chunks,
 * keys weighed by their parts;
 * with EGM_PIPELINE_DEPTH ahead threads every chunk's ahead call runs once,
 * the caller gets each chunk's own reply and error detail, and the behind
 * step sees the chunks in order; chunk 0's ahead call runs on the caller's
 * thread within egm__pipeline_start, the others on the helpers, which a pool
 * serves from one call to the next; at trace level the pipeline logs one line per
 * chunk with its steps' times, in the order they ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include "client/pipeline.h"
#include "common/alloc.h"
#include "common/log.h"

/* The plan of n keys of `parts` parts each (0: one part, no weights given)
 * covers every key once, in order; every chunk holds what fits its cap and only
 * the last falls short of it (or a lone key heavier than the cap). */
static void check_layout(size_t n, size_t parts)
{
    size_t *weights = NULL;
    if (parts > 0) {
        weights = calloc(n ? n : 1, sizeof(*weights));
        assert_non_null(weights);
        for (size_t i = 0; i < n; i++)
            weights[i] = parts;
    }
    size_t w = parts > 0 ? parts : 1;
    egm_parts_t view = {0};
    if (weights != NULL)
        assert_int_equal(egm__parts_init(&view, n, weights, NULL, NULL), EGM_OK);
    egm_chunk_plan_t plan;
    assert_int_equal(egm__chunk_plan(n, weights != NULL ? &view : NULL, NULL, 0, &plan), EGM_OK);
    assert_int_equal(plan.parts, n * w);
    size_t next = 0;
    for (size_t k = 0; k < plan.n_chunks; k++) {
        size_t len = egm__chunk_len(&plan, k);
        assert_int_equal(egm__chunk_first(&plan, k), next);
        assert_true(len >= 1);
        /* 128, 256, 512, then 1024 parts; only the last chunk may be short. */
        size_t cap =
            k >= 3 ? EGM_PIPELINE_CHUNK_PARTS : (size_t)EGM_PIPELINE_FIRST_CHUNK_PARTS << k;
        assert_int_equal(egm__pipeline_chunk_cap(k), cap);
        size_t fit = cap / w > 0 ? cap / w : 1;
        assert_true(len <= fit);
        if (k + 1 < plan.n_chunks)
            assert_int_equal(len, fit);
        next += len;
    }
    assert_int_equal(next, n);
    egm__chunk_plan_free(&plan);
    egm__parts_free(&view);
    free(weights);
}

/* n keys of w parts each, as the parts view a batch call makes; *weights_p
 * to free after the view. */
static egm_parts_t uniform_parts(size_t n, size_t w, size_t **weights_p)
{
    size_t *weights = calloc(n ? n : 1, sizeof(*weights));
    assert_non_null(weights);
    for (size_t i = 0; i < n; i++)
        weights[i] = w;
    egm_parts_t view;
    assert_int_equal(egm__parts_init(&view, n, weights, NULL, NULL), EGM_OK);
    *weights_p = weights;
    return view;
}

static size_t n_chunks(size_t n, size_t parts)
{
    size_t *weights;
    egm_parts_t view = uniform_parts(n, parts, &weights);
    egm_chunk_plan_t plan;
    assert_int_equal(egm__chunk_plan(n, &view, NULL, 0, &plan), EGM_OK);
    size_t c = plan.n_chunks;
    assert_int_equal(egm__chunk_plan_pipelined(&plan),
                     n * parts >= EGM_PIPELINE_MIN_PARTS && plan.n_chunks > 1);
    egm__chunk_plan_free(&plan);
    egm__parts_free(&view);
    free(weights);
    return c;
}

/* A put's plan (shrink_tail): every key once, in order; the head grows as a
 * get's does, the last EGM_PIPELINE_TAIL_CHUNKS chunks shrink toward the end
 * (the t-th from the end fills at most egm__pipeline_chunk_cap(t) parts, a
 * heavier key alone); 2048 one-part keys: 128, 256, 512, 256 | 512, 256, 128. */
static void check_tail_layout(size_t n, size_t w, const size_t *expect, size_t n_expect)
{
    size_t *weights;
    egm_parts_t view = uniform_parts(n, w, &weights);
    egm_chunk_plan_t plan;
    assert_int_equal(egm__chunk_plan(n, &view, NULL, 1, &plan), EGM_OK);
    assert_int_equal(plan.parts, n * w);
    assert_int_equal(egm__chunk_first(&plan, 0), 0);
    assert_int_equal(plan.first[plan.n_chunks], n);
    for (size_t k = 0; k < plan.n_chunks; k++) {
        size_t len = egm__chunk_len(&plan, k);
        assert_true(len >= 1);
        size_t from_end = plan.n_chunks - 1 - k;
        size_t cap = from_end < EGM_PIPELINE_TAIL_CHUNKS ? egm__pipeline_chunk_cap(from_end)
                                                         : egm__pipeline_chunk_cap(k);
        assert_true(len == 1 || len * w <= cap);
    }
    if (expect != NULL) {
        assert_int_equal(plan.n_chunks, n_expect);
        for (size_t k = 0; k < n_expect; k++)
            assert_int_equal(egm__chunk_len(&plan, k) * w, expect[k]);
    }
    egm__chunk_plan_free(&plan);
    egm__parts_free(&view);
    free(weights);
}

static void test_put_plan_shrinks_its_tail(void **state)
{
    (void)state;
    static const size_t kv_medium[] = {128, 256, 512, 256, 512, 256, 128}; /* 1024 x 2 */
    check_tail_layout(1024, 2, kv_medium, 7);
    static const size_t vllm_64[] = {128, 256, 512, 1024, 1024, 256, 512, 256, 128}; /* x 64 */
    check_tail_layout(64, 64, vllm_64, 9);
    static const size_t small[] = {100}; /* one chunk: the whole batch */
    check_tail_layout(100, 1, small, 1);
    static const size_t two[] = {72, 128}; /* 200: tail 128, then what is left */
    check_tail_layout(200, 1, two, 2);
    for (size_t n = 0; n < 5000; n += 37)
        for (size_t w = 1; w <= 300; w *= 7)
            check_tail_layout(n, w, NULL, 0);
}

static void test_layout_covers_every_key_once(void **state)
{
    (void)state;
    static const size_t sizes[] = {0,
                                   1,
                                   EGM_PIPELINE_FIRST_CHUNK_PARTS - 1,
                                   EGM_PIPELINE_FIRST_CHUNK_PARTS,
                                   EGM_PIPELINE_FIRST_CHUNK_PARTS + 1,
                                   EGM_PIPELINE_MIN_PARTS,
                                   EGM_PIPELINE_FIRST_CHUNK_PARTS + 3 * EGM_PIPELINE_CHUNK_PARTS,
                                   EGM_PIPELINE_FIRST_CHUNK_PARTS + 3 * EGM_PIPELINE_CHUNK_PARTS +
                                       1,
                                   8192,
                                   100000};
    static const size_t parts[] = {0, 1, 2, 64, 100, 2000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t j = 0; j < sizeof(parts) / sizeof(parts[0]); j++)
            if (sizes[i] * (parts[j] ? parts[j] : 1) <= 1000000)
                check_layout(sizes[i], parts[j]);
    /* One part a key, as before parts weighed: 8192 = 128 + 256 + 512 + 7 x 1024
     * + 128: 11 chunks; 2048: 128 + 256 + 512 + 1024 + 128. */
    assert_int_equal(n_chunks(8192, 1), 11);
    assert_int_equal(n_chunks(2048, 1), 5);
    assert_int_equal(n_chunks(1, 1), 1);
    assert_int_equal(n_chunks(128, 1), 1);
    assert_int_equal(n_chunks(129, 1), 2);
    /* vLLM's keys of 64 pieces: 2, 4, 8, then 16 keys a chunk; 256 keys: 2 + 4
     * + 8 + 15 x 16 + 2; 16 keys (1024 parts): 2 + 4 + 8 + 2. */
    assert_int_equal(n_chunks(256, 64), 19);
    assert_int_equal(n_chunks(64, 64), 7);
    assert_int_equal(n_chunks(16, 64), 4);
    /* A key heavier than the cap is a chunk of its own. */
    assert_int_equal(n_chunks(3, 5000), 3);
    assert_true(EGM_PIPELINE_FIRST_CHUNK_PARTS <= EGM_PIPELINE_CHUNK_PARTS);
    assert_true(EGM_PIPELINE_DEPTH >= 1);
}

#define N_CHUNKS 9
#define FAIL_CHUNK 4

typedef struct {
    atomic_int ahead_calls[N_CHUNKS];
    size_t behind_order[N_CHUNKS];
    size_t n_behind;
} probe_t;

static egm_status_t probe_ahead(void *arg, size_t k, void **reply_p)
{
    probe_t *pr = arg;
    atomic_fetch_add(&pr->ahead_calls[k], 1);
    if (k == FAIL_CHUNK) {
        *reply_p = NULL;
        return egm__set_error(EGM_ERR_TIMEOUT, "chunk %zu timed out", k);
    }
    size_t *reply = egm_malloc(sizeof(*reply), "test.pipeline");
    assert_non_null(reply);
    *reply = k;
    *reply_p = reply;
    return EGM_OK;
}

static void probe_behind(void *arg, size_t k, void *reply)
{
    probe_t *pr = arg;
    assert_int_equal(*(size_t *)reply, k);
    pr->behind_order[pr->n_behind++] = k;
    egm_free(reply);
}

static void test_depth_every_chunk_once_in_order(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    static probe_t pr;
    egm_pipeline_t *p;

    memset(&pr, 0, sizeof(pr));
    assert_int_equal(
        egm__pipeline_start(NULL, "test", N_CHUNKS, probe_ahead, probe_behind, &pr, &p), EGM_OK);
    for (size_t k = 0; k < N_CHUNKS; k++) {
        void *reply = NULL;
        uint64_t started_ms = 0;
        egm_status_t st = egm__pipeline_wait(p, k, &reply, &started_ms);
        if (k == FAIL_CHUNK) {
            assert_int_equal(st, EGM_ERR_TIMEOUT);
            assert_null(reply);
            assert_non_null(strstr(egm_last_error(), "chunk 4 timed out"));
            egm__pipeline_release(p, k, NULL, 0);
            continue;
        }
        assert_int_equal(st, EGM_OK);
        assert_non_null(reply);
        assert_int_equal(*(size_t *)reply, k);
        assert_true(started_ms > 0);
        egm__pipeline_release(p, k, reply, 1);
    }
    egm__pipeline_finish(p);
    for (size_t k = 0; k < N_CHUNKS; k++)
        assert_int_equal(atomic_load(&pr.ahead_calls[k]), 1);
    assert_int_equal(pr.n_behind, N_CHUNKS - 1);
    for (size_t i = 0; i + 1 < pr.n_behind; i++)
        assert_true(pr.behind_order[i] < pr.behind_order[i + 1]);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Chunks released out of order (two copy workers finish in any order): the
 * behind step still runs chunk by chunk in order, each after its own release
 * and with its own reply. Here every chunk is waited for first, then released
 * last to first. */
static void test_release_out_of_order(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    static probe_t pr;
    egm_pipeline_t *p;
    void *replies[N_CHUNKS];

    memset(&pr, 0, sizeof(pr));
    assert_int_equal(
        egm__pipeline_start(NULL, "test", N_CHUNKS, probe_ahead, probe_behind, &pr, &p), EGM_OK);
    for (size_t k = 0; k < N_CHUNKS; k++) {
        replies[k] = NULL;
        egm_status_t st = egm__pipeline_wait(p, k, &replies[k], NULL);
        assert_int_equal(st, k == FAIL_CHUNK ? EGM_ERR_TIMEOUT : EGM_OK);
    }
    for (size_t k = N_CHUNKS; k-- > 0;)
        egm__pipeline_release(p, k, replies[k], replies[k] != NULL);
    egm__pipeline_finish(p);
    assert_int_equal(pr.n_behind, N_CHUNKS - 1);
    for (size_t i = 0; i + 1 < pr.n_behind; i++)
        assert_true(pr.behind_order[i] < pr.behind_order[i + 1]);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* egm__pipeline_copy: every chunk copied once, by the workers together; the
 * answer is the lowest failed chunk's status and text, whichever worker had it. */
typedef struct {
    atomic_int calls[N_CHUNKS];
} copy_probe_t;

static egm_status_t probe_copy(void *arg, size_t k)
{
    copy_probe_t *c = arg;
    atomic_fetch_add(&c->calls[k], 1);
    if (k == 3 || k == 6)
        return egm__set_error(k == 3 ? EGM_ERR_TRANSFER : EGM_ERR_TIMEOUT, "chunk %zu failed", k);
    return EGM_OK;
}

static void test_copy_workers(void **state)
{
    (void)state;
    static copy_probe_t c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(egm__pipeline_copy(NULL, N_CHUNKS, probe_copy, &c), EGM_ERR_TRANSFER);
    assert_non_null(strstr(egm_last_error(), "chunk 3 failed"));
    for (size_t k = 0; k < N_CHUNKS; k++)
        assert_int_equal(atomic_load(&c.calls[k]), 1);
    memset(&c, 0, sizeof(c));
    assert_int_equal(egm__pipeline_copy(NULL, 3, probe_copy, &c), EGM_OK);
    assert_int_equal(atomic_load(&c.calls[0]) + atomic_load(&c.calls[1]) + atomic_load(&c.calls[2]),
                     3);
    assert_int_equal(egm__pipeline_copy(NULL, 0, probe_copy, &c), EGM_OK);
}

/* Chunk 0's ahead call fails (it ran on the caller's thread, in the start):
 * its wait answers the status and text, the other chunks go on. */
static egm_status_t fail_first_ahead(void *arg, size_t k, void **reply_p)
{
    if (k == 0) {
        probe_t *pr = arg;
        atomic_fetch_add(&pr->ahead_calls[0], 1);
        *reply_p = NULL;
        return egm__set_error(EGM_ERR_UNREACHABLE, "chunk 0 found no master");
    }
    return probe_ahead(arg, k, reply_p);
}

static void test_first_chunk_fails(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    static probe_t pr;
    egm_pipeline_t *p;

    memset(&pr, 0, sizeof(pr));
    assert_int_equal(egm__pipeline_start(NULL, "test", 3, fail_first_ahead, probe_behind, &pr, &p),
                     EGM_OK);
    egm__set_error(EGM_ERR_TIMEOUT, "something else since");
    void *reply = (void *)&pr;
    assert_int_equal(egm__pipeline_wait(p, 0, &reply, NULL), EGM_ERR_UNREACHABLE);
    assert_null(reply);
    assert_non_null(strstr(egm_last_error(), "chunk 0 found no master"));
    egm__pipeline_release(p, 0, NULL, 0);
    for (size_t k = 1; k < 3; k++) {
        assert_int_equal(egm__pipeline_wait(p, k, &reply, NULL), EGM_OK);
        assert_int_equal(*(size_t *)reply, k);
        egm__pipeline_release(p, k, reply, 1);
    }
    egm__pipeline_finish(p);
    assert_int_equal(pr.n_behind, 2);
    assert_int_equal(pr.behind_order[0], 1);
    assert_int_equal(pr.behind_order[1], 2);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_fewer_chunks_than_depth(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    static probe_t pr;
    egm_pipeline_t *p;
    void *reply = NULL;

    memset(&pr, 0, sizeof(pr));
    assert_int_equal(egm__pipeline_start(NULL, "test", 1, probe_ahead, NULL, &pr, &p), EGM_OK);
    assert_int_equal(egm__pipeline_wait(p, 0, &reply, NULL), EGM_OK);
    assert_int_equal(*(size_t *)reply, 0);
    egm_free(reply);
    egm__pipeline_release(p, 0, NULL, 0);
    egm__pipeline_finish(p);
    assert_int_equal(atomic_load(&pr.ahead_calls[0]), 1);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Which thread ran each chunk's ahead call; the slow chunks' steps make their
 * waiters sleep. */
#define SLOW_AHEAD 2
#define SLOW_BEHIND 1
typedef struct {
    pthread_t ahead_thread[N_CHUNKS];
    atomic_int ahead_calls[N_CHUNKS];
    size_t behind_order[N_CHUNKS];
    size_t n_behind;
} where_t;

static void sleep_a_while(void)
{
    usleep(3000);
}

static egm_status_t where_ahead(void *arg, size_t k, void **reply_p)
{
    where_t *w = arg;
    w->ahead_thread[k] = pthread_self();
    atomic_fetch_add(&w->ahead_calls[k], 1);
    if (k == SLOW_AHEAD)
        sleep_a_while();
    size_t *reply = egm_malloc(sizeof(*reply), "test.pipeline");
    assert_non_null(reply);
    *reply = k;
    *reply_p = reply;
    return EGM_OK;
}

static void where_behind(void *arg, size_t k, void *reply)
{
    where_t *w = arg;
    assert_int_equal(*(size_t *)reply, k);
    if (k == SLOW_BEHIND || k == N_CHUNKS - 1)
        sleep_a_while(); /* the last: egm__pipeline_finish's join sleeps too */
    w->behind_order[w->n_behind++] = k;
    egm_free(reply);
}

static void run_where(egm_workers_t *workers)
{
    static where_t w;
    egm_pipeline_t *p;

    memset(&w, 0, sizeof(w));
    assert_int_equal(
        egm__pipeline_start(workers, "test", N_CHUNKS, where_ahead, where_behind, &w, &p), EGM_OK);
    /* Chunk 0 is fetched before the start returns, on this thread. */
    assert_int_equal(atomic_load(&w.ahead_calls[0]), 1);
    assert_true(pthread_equal(w.ahead_thread[0], pthread_self()));
    for (size_t k = 0; k < N_CHUNKS; k++) {
        void *reply = NULL;
        assert_int_equal(egm__pipeline_wait(p, k, &reply, NULL), EGM_OK);
        assert_int_equal(*(size_t *)reply, k);
        if (k == SLOW_BEHIND - 1)
            sleep_a_while(); /* the behind thread sleeps for chunk SLOW_BEHIND's release */
        egm__pipeline_release(p, k, reply, 1);
    }
    egm__pipeline_finish(p);
    for (size_t k = 0; k < N_CHUNKS; k++) {
        assert_int_equal(atomic_load(&w.ahead_calls[k]), 1);
        if (k > 0) /* the helpers' */
            assert_false(pthread_equal(w.ahead_thread[k], pthread_self()));
    }
    assert_int_equal(w.n_behind, N_CHUNKS);
    for (size_t i = 0; i < N_CHUNKS; i++)
        assert_int_equal(w.behind_order[i], i);
}

static void test_first_chunk_on_caller_pooled(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    egm_workers_t *workers;

    run_where(NULL);
    assert_int_equal(egm__workers_create(8, &workers), EGM_OK);
    /* Two ahead helpers and the behind one at most (fewer when a helper was
     * done before the next was asked for), kept and used again: a second call
     * makes none beyond that. */
    for (int call = 0; call < 3; call++) {
        run_where(workers);
        assert_true(egm__workers_threads(workers) >= 1);
        assert_true(egm__workers_threads(workers) <= EGM_PIPELINE_DEPTH + 1);
    }
    egm__workers_destroy(workers);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* At trace level egm__pipeline_finish logs one line per chunk (stderr, caught
 * in a file here): the ahead call, the caller's wait, the release and the
 * behind step, each in the order a chunk goes through them; nothing at info. */
static void test_trace_lines(void **state)
{
    (void)state;
    static probe_t pr;
    char path[] = "/tmp/egm-pipeline-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    for (int level = EGM_LOG_INFO; level <= EGM_LOG_TRACE; level += EGM_LOG_TRACE - EGM_LOG_INFO) {
        egm_pipeline_t *p;
        memset(&pr, 0, sizeof(pr));
        assert_int_equal(ftruncate(fd, 0), 0);
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
        assert_true(dup2(fd, STDERR_FILENO) >= 0);
        egm__log_set_level((egm_log_level_t)level);
        assert_int_equal(
            egm__pipeline_start(NULL, "test", N_CHUNKS, probe_ahead, probe_behind, &pr, &p),
            EGM_OK);
        for (size_t k = 0; k < N_CHUNKS; k++) {
            void *reply = NULL;
            egm_status_t st = egm__pipeline_wait(p, k, &reply, NULL);
            egm__pipeline_release(p, k, st == EGM_OK ? reply : NULL, st == EGM_OK);
        }
        egm__pipeline_finish(p);
        egm__log_set_level(EGM_LOG_ERROR);
        assert_true(dup2(saved, STDERR_FILENO) >= 0);

        static char text[16384];
        ssize_t len = pread(fd, text, sizeof(text) - 1, 0);
        assert_true(len >= 0);
        text[len] = '\0';
        size_t lines = 0;
        for (const char *at = text; (at = strstr(at, "pipeline test chunk ")) != NULL; at++) {
            size_t k, n;
            long a0, a1, w0, w1, rel, b0, b1, fin;
            assert_int_equal(sscanf(at,
                                    "pipeline test chunk %zu/%zu (us from start): ahead %ld-%ld, "
                                    "waited %ld-%ld, released %ld, behind %ld-%ld; finished %ld",
                                    &k, &n, &a0, &a1, &w0, &w1, &rel, &b0, &b1, &fin),
                             10);
            assert_int_equal(k, lines);
            assert_int_equal(n, N_CHUNKS);
            assert_true(0 <= a0 && a0 <= a1 && a1 <= w1 && w0 <= w1 && w1 <= rel && rel <= fin);
            if (k == FAIL_CHUNK) /* released without a reply: no behind step */
                assert_true(b0 == -1 && b1 == -1);
            else
                assert_true(rel <= b0 && b0 <= b1 && b1 <= fin);
            lines++;
        }
        assert_int_equal(lines, level == EGM_LOG_TRACE ? N_CHUNKS : 0);
    }
    close(saved);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_covers_every_key_once),
        cmocka_unit_test(test_put_plan_shrinks_its_tail),
        cmocka_unit_test(test_depth_every_chunk_once_in_order),
        cmocka_unit_test(test_release_out_of_order),
        cmocka_unit_test(test_copy_workers),
        cmocka_unit_test(test_fewer_chunks_than_depth),
        cmocka_unit_test(test_first_chunk_fails),
        cmocka_unit_test(test_first_chunk_on_caller_pooled),
        cmocka_unit_test(test_trace_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
