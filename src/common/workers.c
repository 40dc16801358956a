/* A pool of reusable threads: see workers.h. */
#include "common/workers.h"

#include "common/alloc.h"
#include "common/log.h"

typedef struct worker {
    struct worker *next;      /* every thread of the pool */
    struct worker *next_idle; /* the idle ones (under lock) */
    egm_workers_t *pool;
    pthread_t thread;
    pthread_cond_t wake;
    egm_worker_job_t *job; /* handed to it (under lock) */
} worker_t;

struct egm_workers {
    pthread_mutex_t lock;
    pthread_cond_t done; /* a job of the pool's threads returned */
    worker_t *all, *idle;
    size_t n, max; /* n: threads started or being started */
    int stopping;
};

static void *worker_main(void *arg)
{
    worker_t *wk = arg;
    egm_workers_t *w = wk->pool;

    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (wk->job == NULL && !w->stopping)
            pthread_cond_wait(&wk->wake, &w->lock);
        egm_worker_job_t *job = wk->job;
        if (job == NULL)
            break; /* stopping, and idle */
        pthread_mutex_unlock(&w->lock);
        job->fn(job->arg);
        pthread_mutex_lock(&w->lock);
        wk->job = NULL;
        job->done = 1; /* the job's memory may be gone once the lock is dropped */
        wk->next_idle = w->idle;
        w->idle = wk;
        pthread_cond_broadcast(&w->done);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void *own_main(void *arg)
{
    egm_worker_job_t *job = arg;
    job->fn(job->arg);
    return NULL;
}

egm_status_t egm__workers_create(size_t max_threads, egm_workers_t **workers_p)
{
    egm_workers_t *w = egm_calloc(1, sizeof(*w), "common.workers");
    *workers_p = NULL;
    if (w == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a thread pool");
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->done, NULL);
    w->max = max_threads;
    *workers_p = w;
    return EGM_OK;
}

void egm__workers_destroy(egm_workers_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    for (worker_t *wk = w->all; wk != NULL; wk = wk->next)
        pthread_cond_signal(&wk->wake);
    pthread_mutex_unlock(&w->lock);
    for (worker_t *wk = w->all, *next; wk != NULL; wk = next) {
        next = wk->next;
        pthread_join(wk->thread, NULL);
        pthread_cond_destroy(&wk->wake);
        egm_free(wk);
    }
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->lock);
    egm_free(w);
}

/* A new thread for the pool, started with job: 0, or -1 (the pool unchanged). */
static int add_worker(egm_workers_t *w, egm_worker_job_t *job)
{
    worker_t *wk = egm_calloc(1, sizeof(*wk), "common.workers");
    if (wk == NULL)
        return -1;
    wk->pool = w;
    wk->job = job;
    pthread_cond_init(&wk->wake, NULL);
    /* Created outside the lock (it takes tens of microseconds): the slot was
     * counted in n under it. */
    if (pthread_create(&wk->thread, NULL, worker_main, wk) != 0) {
        pthread_cond_destroy(&wk->wake);
        egm_free(wk);
        return -1;
    }
    pthread_mutex_lock(&w->lock);
    wk->next = w->all;
    w->all = wk;
    pthread_mutex_unlock(&w->lock);
    return 0;
}

int egm__workers_start(egm_workers_t *w, egm_worker_job_t *job, void (*fn)(void *arg), void *arg)
{
    job->fn = fn;
    job->arg = arg;
    job->done = 0;
    job->own = 0;
    if (w != NULL) {
        pthread_mutex_lock(&w->lock);
        worker_t *wk = w->idle;
        if (wk != NULL && !w->stopping) {
            w->idle = wk->next_idle;
            wk->job = job;
            pthread_cond_signal(&wk->wake);
            pthread_mutex_unlock(&w->lock);
            return 0;
        }
        int grow = w->n < w->max && !w->stopping;
        if (grow)
            w->n++;
        pthread_mutex_unlock(&w->lock);
        if (grow) {
            if (add_worker(w, job) == 0)
                return 0;
            pthread_mutex_lock(&w->lock);
            w->n--;
            pthread_mutex_unlock(&w->lock);
        }
    }
    job->own = 1;
    return pthread_create(&job->thread, NULL, own_main, job) == 0 ? 0 : -1;
}

void egm__workers_join(egm_workers_t *w, egm_worker_job_t *job)
{
    if (job->own) {
        pthread_join(job->thread, NULL);
        return;
    }
    pthread_mutex_lock(&w->lock);
    while (!job->done)
        pthread_cond_wait(&w->done, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

size_t egm__workers_threads(egm_workers_t *w)
{
    pthread_mutex_lock(&w->lock);
    size_t n = w->n;
    pthread_mutex_unlock(&w->lock);
    return n;
}
