/* Chunk pipeline: see pipeline.h. */
#include "client/pipeline.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/workers.h"

typedef struct {
    void *reply;
    egm_status_t status;
    char error[256]; /* the ahead thread's egm_last_error when status != EGM_OK */
    void *behind_reply;
    int run_behind;
    int fetched;  /* its ahead call has returned (under lock) */
    int released; /* the caller is done with it (under lock) */
    /* When each step began and ended (egm__now_ns), for the trace log: the
     * ahead call, the caller's wait for it, its release, the behind step. */
    uint64_t ahead_ns[2], wait_ns[2], release_ns, behind_ns[2];
} chunk_t;

typedef struct {
    egm_pipeline_t *p;
    size_t index; /* takes chunks 1 + index, 1 + index + EGM_PIPELINE_DEPTH, ... */
    egm_worker_job_t job;
    int running;
} ahead_t;

struct egm_pipeline {
    const char *what; /* "put" or "get", for the trace log */
    egm_workers_t *workers;
    uint64_t start_ns;
    size_t n_chunks;
    egm_pipeline_ahead_fn ahead;
    egm_pipeline_behind_fn behind;
    void *arg;
    chunk_t *chunks;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ahead_t aheads[EGM_PIPELINE_DEPTH];
    egm_worker_job_t behind_job;
    int behind_running;
};

/* Sets *flag under the pipeline's lock and wakes its sleepers. */
static void set_flag(egm_pipeline_t *p, int *flag)
{
    pthread_mutex_lock(&p->lock);
    *flag = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* Waits for set_flag(p, flag). */
static void wait_flag(egm_pipeline_t *p, const int *flag)
{
    pthread_mutex_lock(&p->lock);
    while (!*flag)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

static void run_ahead(egm_pipeline_t *p, size_t k)
{
    chunk_t *c = &p->chunks[k];
    c->ahead_ns[0] = egm__now_ns();
    c->status = p->ahead(p->arg, k, &c->reply);
    c->ahead_ns[1] = egm__now_ns();
    if (c->status != EGM_OK)
        snprintf(c->error, sizeof(c->error), "%s", egm_last_error());
}

static void ahead_main(void *arg)
{
    ahead_t *a = arg;
    egm_pipeline_t *p = a->p;
    for (size_t k = 1 + a->index; k < p->n_chunks; k += EGM_PIPELINE_DEPTH) {
        run_ahead(p, k);
        set_flag(p, &p->chunks[k].fetched);
    }
}

static void behind_step(egm_pipeline_t *p, size_t k)
{
    chunk_t *c = &p->chunks[k];
    c->behind_ns[0] = egm__now_ns();
    p->behind(p->arg, k, c->behind_reply);
    c->behind_ns[1] = egm__now_ns();
}

static void behind_main(void *arg)
{
    egm_pipeline_t *p = arg;
    for (size_t k = 0; k < p->n_chunks; k++) {
        wait_flag(p, &p->chunks[k].released);
        if (p->chunks[k].run_behind)
            behind_step(p, k);
    }
}

/* Starts ahead helper t when it has a chunk to take: 0 when it should have
 * and could not (its chunks then run inline at their wait). */
static int start_ahead(egm_pipeline_t *p, size_t t)
{
    ahead_t *a = &p->aheads[t];
    a->p = p;
    a->index = t;
    if (1 + t >= p->n_chunks)
        return 1;
    a->running = egm__workers_start(p->workers, &a->job, ahead_main, a) == 0;
    return a->running;
}

egm_status_t egm__pipeline_start(egm_workers_t *workers, const char *what, size_t n_chunks,
                                 egm_pipeline_ahead_fn ahead, egm_pipeline_behind_fn behind,
                                 void *arg, egm_pipeline_t **p_out)
{
    egm_pipeline_t *p = egm_calloc(1, sizeof(*p), "client.pipeline");

    *p_out = NULL;
    if (p != NULL)
        p->chunks = egm_calloc(n_chunks ? n_chunks : 1, sizeof(*p->chunks), "client.pipeline");
    if (p == NULL || p->chunks == NULL) {
        egm_free(p);
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a %zu-chunk pipeline",
                              n_chunks);
    }
    p->what = what;
    p->workers = workers;
    p->start_ns = egm__now_ns();
    p->n_chunks = n_chunks;
    p->ahead = ahead;
    p->behind = behind;
    p->arg = arg;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    /* Chunk 0's ahead step runs here, on the caller's thread, so that it does
     * not wait for a thread to start (60-200 us on the H200 host); the helper
     * for chunk 1 is started before it, the others after it. No more helpers
     * than chunks: a small batch needs no idle threads. */
    int all_started = start_ahead(p, 0);
    if (n_chunks > 0) {
        run_ahead(p, 0);
        set_flag(p, &p->chunks[0].fetched);
    }
    for (size_t t = 1; t < EGM_PIPELINE_DEPTH; t++)
        all_started &= start_ahead(p, t);
    if (behind != NULL)
        p->behind_running = egm__workers_start(workers, &p->behind_job, behind_main, p) == 0;
    if (!all_started || (behind != NULL && !p->behind_running))
        egm_debug("pipeline: a helper thread did not start; its work runs inline");
    *p_out = p;
    return EGM_OK;
}

egm_status_t egm__pipeline_wait(egm_pipeline_t *p, size_t k, void **reply_p, uint64_t *started_ms_p)
{
    chunk_t *c = &p->chunks[k];

    c->wait_ns[0] = egm__now_ns();
    if (k == 0 || p->aheads[(k - 1) % EGM_PIPELINE_DEPTH].running)
        wait_flag(p, &c->fetched); /* chunk 0's ran in egm__pipeline_start */
    else
        run_ahead(p, k);
    c->wait_ns[1] = egm__now_ns();
    *reply_p = c->reply;
    c->reply = NULL;
    if (started_ms_p != NULL)
        *started_ms_p = c->ahead_ns[0] / 1000000u; /* egm__now_ms's clock */
    if (c->status != EGM_OK)
        egm__set_error(c->status, "%s", c->error);
    return c->status;
}

void egm__pipeline_release(egm_pipeline_t *p, size_t k, void *reply, int run_behind)
{
    chunk_t *c = &p->chunks[k];

    c->release_ns = egm__now_ns();
    c->run_behind = run_behind && p->behind != NULL;
    c->behind_reply = reply;
    if (c->run_behind && !p->behind_running) {
        behind_step(p, k);
        c->run_behind = 0;
    }
    set_flag(p, &c->released);
}

/* Microseconds from the pipeline's start to t (0: the step did not run). */
static long since_us(const egm_pipeline_t *p, uint64_t t)
{
    return t == 0 ? -1 : (long)((t - p->start_ns) / 1000);
}

/* At trace level, one line per chunk: when each of its steps began and ended,
 * in microseconds from the pipeline's start (-1: not run). */
static void trace_chunks(const egm_pipeline_t *p)
{
    uint64_t end = egm__now_ns();
    for (size_t k = 0; k < p->n_chunks; k++) {
        const chunk_t *c = &p->chunks[k];
        egm_trace("pipeline %s chunk %zu/%zu (us from start): ahead %ld-%ld, waited %ld-%ld, "
                  "released %ld, behind %ld-%ld; finished %ld",
                  p->what, k, p->n_chunks, since_us(p, c->ahead_ns[0]), since_us(p, c->ahead_ns[1]),
                  since_us(p, c->wait_ns[0]), since_us(p, c->wait_ns[1]),
                  since_us(p, c->release_ns), since_us(p, c->behind_ns[0]),
                  since_us(p, c->behind_ns[1]), since_us(p, end));
    }
}

void egm__pipeline_finish(egm_pipeline_t *p)
{
    if (p == NULL)
        return;
    for (size_t t = 0; t < EGM_PIPELINE_DEPTH; t++)
        if (p->aheads[t].running)
            egm__workers_join(p->workers, &p->aheads[t].job);
    if (p->behind_running)
        egm__workers_join(p->workers, &p->behind_job);
    if (egm__log_enabled(EGM_LOG_TRACE))
        trace_chunks(p);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    egm_free(p->chunks);
    egm_free(p);
}

typedef struct {
    egm_pipeline_copy_fn copy;
    void *arg;
    size_t n_chunks, start;
    egm_status_t status; /* of its lowest failed chunk */
    size_t failed_chunk;
    char error[256];
    egm_worker_job_t job;
} copy_worker_t;

static void copy_chunks(copy_worker_t *w)
{
    w->status = EGM_OK;
    for (size_t k = w->start; k < w->n_chunks; k += EGM_PIPELINE_COPY_WORKERS) {
        egm_status_t st = w->copy(w->arg, k);
        if (w->status == EGM_OK && st != EGM_OK) {
            w->status = st;
            w->failed_chunk = k;
            snprintf(w->error, sizeof(w->error), "%s", egm_last_error());
        }
    }
}

static void copy_main(void *arg)
{
    copy_chunks(arg);
}

egm_status_t egm__pipeline_copy(egm_workers_t *pool, size_t n_chunks, egm_pipeline_copy_fn copy,
                                void *arg)
{
    copy_worker_t workers[EGM_PIPELINE_COPY_WORKERS];
    int started[EGM_PIPELINE_COPY_WORKERS] = {0};
    size_t n = n_chunks < EGM_PIPELINE_COPY_WORKERS ? n_chunks : EGM_PIPELINE_COPY_WORKERS;

    for (size_t t = 0; t < n; t++)
        workers[t] = (copy_worker_t){.copy = copy, .arg = arg, .n_chunks = n_chunks, .start = t};
    for (size_t t = 1; t < n; t++)
        started[t] = egm__workers_start(pool, &workers[t].job, copy_main, &workers[t]) == 0;
    if (n > 0)
        copy_chunks(&workers[0]);
    for (size_t t = 1; t < n; t++) {
        if (started[t])
            egm__workers_join(pool, &workers[t].job);
        else
            copy_chunks(&workers[t]);
    }
    const copy_worker_t *failed = NULL;
    for (size_t t = 0; t < n; t++)
        if (workers[t].status != EGM_OK &&
            (failed == NULL || workers[t].failed_chunk < failed->failed_chunk))
            failed = &workers[t];
    if (failed == NULL)
        return EGM_OK;
    return egm__set_error(failed->status, "%s", failed->error);
}

static size_t key_weight(const egm_parts_t *parts, const size_t *index, size_t i)
{
    size_t key = index != NULL ? index[i] : i;
    return parts != NULL ? egm__parts_end(parts, key) - egm__parts_first(parts, key) : 1;
}

egm_status_t egm__chunk_plan(size_t n, const egm_parts_t *parts, const size_t *index,
                             int shrink_tail, egm_chunk_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    /* At most one chunk per key, plus the end. */
    plan->first = egm_malloc((n + 1) * sizeof(*plan->first), "client.chunk_plan");
    if (plan->first == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory cutting a %zu-key batch", n);
    /* The tail, cut from the end: keys [tail[t], tail[t - 1]) are the t-th
     * chunk from the end (tail[-1] = n), of at most
     * egm__pipeline_chunk_cap(t) parts. */
    size_t tail[EGM_PIPELINE_TAIL_CHUNKS], n_tail = 0, end = n;
    while (shrink_tail && n_tail < EGM_PIPELINE_TAIL_CHUNKS && end > 0) {
        size_t in_chunk = 0, j = end;
        while (j > 0 && (in_chunk == 0 || in_chunk + key_weight(parts, index, j - 1) <=
                                              egm__pipeline_chunk_cap(n_tail))) {
            in_chunk += key_weight(parts, index, j - 1);
            j--;
        }
        tail[n_tail++] = j;
        end = j;
    }
    size_t k = 0, in_chunk = 0;
    plan->first[0] = 0;
    for (size_t i = 0; i < end; i++) {
        size_t w = key_weight(parts, index, i);
        if (in_chunk > 0 && in_chunk + w > egm__pipeline_chunk_cap(k)) {
            plan->first[++k] = i;
            in_chunk = 0;
        }
        in_chunk += w;
        plan->parts += w;
    }
    size_t head = end > 0 ? k + 1 : 0;
    for (size_t i = end; i < n; i++)
        plan->parts += key_weight(parts, index, i);
    /* The tail's chunks follow the head's, largest first. */
    for (size_t t = n_tail; t-- > 0;)
        plan->first[head + (n_tail - 1 - t)] = tail[t];
    plan->n_chunks = head + n_tail;
    plan->first[plan->n_chunks] = n;
    return EGM_OK;
}

void egm__chunk_plan_free(egm_chunk_plan_t *plan)
{
    egm_free(plan->first);
    memset(plan, 0, sizeof(*plan));
}
